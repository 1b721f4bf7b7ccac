//! Token windows of the training and held-out texts, prefilled through a recording cache into
//! [`AttentionSamples`].

use std::path::PathBuf;

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{finetune::AttentionSamples, model::CausalLm, tokenizer::Tokenizer};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Args;

/// Token windows of equal length.
pub type Windows = Vec<Vec<u32>>;

/// Full windows of `window` tokens from `paths` in order, at most `tokens` tokens in all (each
/// text's shorter tail is dropped: every window has the same length).
pub fn token_windows(
    tokenizer: &Tokenizer,
    paths: &[PathBuf],
    window: usize,
    tokens: usize,
) -> anyhow::Result<Windows> {
    let mut windows = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let ids = tokenizer.encode(&text, false).with_context(|| format!("tokenizing {}", path.display()))?;
        windows.extend(ids.chunks_exact(window).map(<[u32]>::to_vec));
    }
    windows.truncate(tokens / window);
    Ok(windows)
}

/// The training and held-out windows: `--held-out` texts if given, else the last
/// `--held-out-share` of the training windows.
pub fn split_windows(args: &Args, tokenizer: &Tokenizer) -> anyhow::Result<(Windows, Windows)> {
    let mut train = token_windows(tokenizer, &args.text, args.window, args.tokens)?;
    let held_out = if args.held_out.is_empty() {
        let count = ((train.len() as f64 * args.held_out_share).ceil() as usize).max(1);
        if count >= train.len() {
            bail!("{} windows of {} tokens cannot spare {count} for held-out evaluation", train.len(), args.window);
        }
        train.split_off(train.len() - count)
    } else {
        token_windows(tokenizer, &args.held_out, args.window, args.held_out_tokens)?
    };
    if train.is_empty() || held_out.is_empty() {
        bail!(
            "the texts give {} training and {} held-out windows of {} tokens",
            train.len(),
            held_out.len(),
            args.window
        );
    }
    Ok((train, held_out))
}

/// Prefills `windows` through `model`, `batch` at a time, into samples keeping the last
/// `query_rows` queries of each window.
pub fn record_samples<B: Backend>(
    model: &CausalLm<B>,
    windows: &[Vec<u32>],
    args: &Args,
    what: &str,
    device: &B::Device,
) -> anyhow::Result<AttentionSamples> {
    let mut samples = AttentionSamples::new(model.layers.len(), args.window, args.query_rows)?;
    let bar = ProgressBar::new(windows.len() as u64).with_style(
        ProgressStyle::with_template(&format!("recording {what} [{{bar:30}}] {{pos}}/{{len}} windows, eta {{eta}}"))
            .expect("template"),
    );
    for batch in windows.chunks(args.batch) {
        samples.record(model, batch, device)?;
        bar.inc(batch.len() as u64);
    }
    bar.finish_and_clear();
    Ok(samples)
}
