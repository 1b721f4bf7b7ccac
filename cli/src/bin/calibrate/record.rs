//! Running the model over calibration text with a recording cache.

use std::{path::Path, time::Instant};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{LayerRecording, RecordingScheme},
    fingerprint::ModelFingerprint,
    loading::{load_model, LoadedModel},
    model::{Logits, ModelConfig},
    paths::default_model_path,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Args;

/// One calibration text, tokenized.
struct Text {
    name: String,
    tokens: Vec<u32>,
}

/// What the model recorded, and about what.
pub struct Recorded {
    /// The model file's SHA-256.
    pub fingerprint: ModelFingerprint,
    /// Its hyper-parameters.
    pub model_config: ModelConfig,
    /// Tokens taken from each text, in order.
    pub taken: Vec<(String, usize)>,
    /// Seconds spent running the model.
    pub seconds: f64,
}

pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// The `--text` files as `(file name, contents)`.
pub fn read_texts(args: &Args) -> anyhow::Result<Vec<(String, String)>> {
    args.text
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Ok((file_name(path), text))
        })
        .collect()
}

/// `"a.txt: 100 tokens + b.txt: 20 tokens in windows of 1024"`: what calibration ran on.
pub fn describe(recorded: &Recorded, window: usize) -> String {
    let texts: Vec<String> = recorded.taken.iter().map(|(name, n)| format!("{name}: {n} tokens")).collect();
    format!("{} in windows of {window}", texts.join(" + "))
}

/// Loads the model, tokenizes the texts (`(file name, contents)`) and prefills them window by
/// window through a recording cache (queries too if `record_queries`), up to `args.tokens`
/// tokens, handing each batch's recordings to `on_batch`. Returns the loaded model too.
pub fn record<B: Backend>(
    device: B::Device,
    args: &Args,
    check_model: &dyn Fn(&ModelConfig) -> anyhow::Result<()>,
    sources: &[(String, String)],
    record_queries: bool,
    on_batch: &mut dyn FnMut(Vec<LayerRecording>) -> anyhow::Result<()>,
) -> anyhow::Result<(Recorded, LoadedModel<B>)> {
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let fingerprint = ModelFingerprint::of_path(&path).with_context(|| format!("hashing {}", path.display()))?;
    let loaded = load_model::<B>(&path, &device)
        .with_context(|| format!("loading {} (run `cargo xtask fetch-model` for the default model)", path.display()))?;
    let model_config = loaded.model.config().clone();
    check_model(&model_config).with_context(|| format!("--config for {}", path.display()))?;
    if args.window > model_config.max_position {
        bail!("--window {} is longer than the model's context of {}", args.window, model_config.max_position);
    }
    let tokenizer = loaded.tokenizer.as_ref().context("the model files carry no tokenizer")?;
    let mut texts = Vec::new();
    let mut left = args.tokens;
    for (name, text) in sources {
        if left == 0 {
            break;
        }
        let mut tokens = tokenizer.encode(text, false).with_context(|| format!("tokenizing {name}"))?;
        tokens.truncate(left);
        left -= tokens.len();
        texts.push(Text { name: name.clone(), tokens });
    }
    let total: usize = texts.iter().map(|t| t.tokens.len()).sum();
    if left > 0 {
        eprintln!("note: the texts hold {total} tokens, fewer than --tokens {}", args.tokens);
    }
    // Full windows batch together; each text's shorter tail runs alone.
    let mut batches: Vec<Vec<&[u32]>> = Vec::new();
    for text in &texts {
        let windows: Vec<&[u32]> = text.tokens.chunks(args.window).collect();
        let (full, tail): (Vec<&[u32]>, Vec<&[u32]>) = windows.into_iter().partition(|w| w.len() == args.window);
        batches.extend(full.chunks(args.batch).map(<[&[u32]]>::to_vec));
        batches.extend(tail.into_iter().map(|w| vec![w]));
    }
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("recording K/V [{bar:30}] {pos}/{len} tokens, eta {eta}").expect("template"),
    );
    let scheme = RecordingScheme { record_queries, ..Default::default() };
    let started = Instant::now();
    for batch in &batches {
        let rows: Vec<Vec<u32>> = batch.iter().map(|w| w.to_vec()).collect();
        let mut caches = loaded.model.new_cache(&scheme, rows.len(), &device);
        loaded.model.forward(&rows, &mut caches, Logits::Last).context("prefilling a calibration window")?;
        on_batch(scheme.recorder.take())?;
        bar.inc(rows.iter().map(Vec::len).sum::<usize>() as u64);
    }
    bar.finish_and_clear();
    let recorded = Recorded {
        fingerprint,
        model_config,
        taken: texts.iter().map(|t| (t.name.clone(), t.tokens.len())).collect(),
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((recorded, loaded))
}
