//! Decode-perplexity of KV cache schemes on text files, printed as a table beside llama.cpp's own
//! KV cache types on the same model and texts.
//!
//! Protocol (`docs/design.md`): windows of 1024 tokens from the start (no BOS); prefill 512, then feed
//! 512 one at a time through the cache, scoring each with the logits produced before it is fed.

use burn_kvschemes::{with_scheme, AnyScheme, SchemeSpec};
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context;
use burn_kvcompress::{
    cache::DenseScheme,
    cache::KvScheme,
    eval::{decode_perplexity_with, NextTokenLogProbs, PerplexityConfig, PerplexityReport, Reference},
    fingerprint::ModelFingerprint,
    loading::load_model,
    paths::default_model_path,
};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kvcompress_cli::{
    backend_choice::{BackendChoice, KernelBackend},
    reference::{default_texts, llamacpp_bits_per_element, llamacpp_reference_file, load_reference_ppl, ReferencePpl},
    report::create_parent,
    tradeoff::{plot_tradeoff, scheme_family, TradeoffPoint},
    with_backend,
};

/// Decode-perplexity of KV cache schemes, beside llama.cpp's figures.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Model: a `.gguf` file or a Hugging Face directory. Default: SmolLM2-135M-Instruct.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Text files to evaluate (repeatable). Default: the repository's data/tempest.txt and data/gpl-3.txt.
    #[arg(long)]
    text: Vec<PathBuf>,
    /// KV cache schemes (repeatable): `dense`, `hack:bits=2,pi=64,round=stochastic`,
    /// `pq:codebooks=books.safetensors,window=64` (codebooks from `calibrate`),
    /// `zack:rotations=rot.safetensors,rate=0.5` (rotations from `calibrate --scheme zack`; or
    /// `eps=E` for the removal rate; `storage=f16` on wgpu and cuda), or ZACK followed by HACK
    /// quantization of the reduced dimensions, `zack:rotations=rot.safetensors,rate=0.5+hack:bits=2,pi=64`,
    /// or by product quantization, `zack:rotations=rot.safetensors,rate=0.5+pq:codebooks=reduced.safetensors`
    /// (codebooks from `calibrate --scheme zack-pq` at the same rotations and rate).
    #[arg(long, default_value = "dense")]
    kv: Vec<SchemeSpec>,
    /// Most windows of 1024 tokens per text.
    #[arg(long, default_value_t = 4)]
    windows: usize,
    /// Windows run together as one batch (same result, faster).
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
    /// llama.cpp reference file (rows printed beside ours; skipped for texts it lacks). Default:
    /// fixtures/llamacpp-smollm2.json.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Write the table to `<out>.md` and the raw reports to `<out>.json`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Plot perplexity against bits per element (`.svg` with legend, or `.png`), one series per
    /// scheme family (a scheme with its rate left free) and the llama.cpp rows. With several
    /// texts, each text's plot is named `<stem>-<text>.<ext>`.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Render the table (stdout, and `<out>.md` with `--out`; the JSON is not rewritten) and
    /// `--plot` from the raw reports a run wrote (its `<out>.json`) instead of evaluating: the
    /// model is read for its KV geometry only, `--kv` and `--text` are not used.
    #[arg(long)]
    replot: Option<PathBuf>,
}

struct Row {
    text: String,
    report: PerplexityReport,
    bits_per_element: f64,
    /// Mean bits per element at [`STEADY_CONTEXT`] tokens, where the scheme gives it.
    steady_bits: Option<f64>,
}

/// The context at which the table states each format's steady cost (metadata and float slots
/// amortized).
const STEADY_CONTEXT: usize = 8192;

fn evaluate<B: KernelBackend, S: KvScheme<B>>(
    scheme: S,
    model: &burn_kvcompress::model::CausalLm<B>,
    tokens: &[u32],
    config: PerplexityConfig,
    device: &B::Device,
    reference: Reference<'_>,
) -> anyhow::Result<(PerplexityReport, Option<NextTokenLogProbs>)> {
    let bar = ProgressBar::new(0)
        .with_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tokens, eta {eta}").expect("template"));
    bar.set_message(scheme.name());
    let report = decode_perplexity_with(model, &scheme, tokens, config, device, reference, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    Ok(report)
}

fn run<B: KernelBackend>(device: B::Device, args: &Args) -> anyhow::Result<Vec<Row>> {
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let loaded = load_model::<B>(&path, &device)
        .with_context(|| format!("loading {} (run `cargo xtask fetch-model`)", path.display()))?;
    let tokenizer = loaded.tokenizer.context("the model files carry no tokenizer")?;
    let c = loaded.model.config().clone();
    let fingerprint = match args.kv.iter().any(|kv| matches!(kv, SchemeSpec::Pq(_) | SchemeSpec::Zack(_))) {
        true => Some(ModelFingerprint::of_path(&path).with_context(|| format!("hashing {}", path.display()))?),
        false => None,
    };
    let schemes = args.kv.iter().map(|kv| kv.resolve(&path, &c, fingerprint)).collect::<anyhow::Result<Vec<_>>>()?;
    let elements_per_token = elements_per_token(&c);
    let config = PerplexityConfig { max_windows: args.windows, batch: args.batch, ..Default::default() };
    let texts = match args.text.is_empty() {
        true => default_texts(),
        false => args.text.clone(),
    };
    // Dense first: its next-token distributions are the reference of every other row's KL.
    let dense = AnyScheme::Dense(DenseScheme);
    let schemes: Vec<&AnyScheme> =
        std::iter::once(&dense).chain(schemes.iter().filter(|s| !matches!(s, AnyScheme::Dense(_)))).collect();
    let mut rows = Vec::new();
    for text_path in &texts {
        let text = std::fs::read_to_string(text_path).with_context(|| format!("reading {}", text_path.display()))?;
        let tokens = tokenizer.encode(&text, false)?;
        let mut dense_record = None;
        for scheme in &schemes {
            let model = scheme.prepare(loaded.model.clone())?;
            let reference = match &dense_record {
                None => Reference::Record,
                Some(record) => Reference::Compare(record),
            };
            let (report, record) =
                with_scheme!((*scheme).clone(), evaluate::<B, _>, (&model, &tokens, config, &device, reference))?;
            dense_record = dense_record.or(record);
            let name = text_path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            eprintln!("{name} {}: ppl {:.4}, KL {:?}", report.scheme, report.ppl, report.mean_kl);
            let bits_per_element = report.kv_bytes_per_token * 8.0 / elements_per_token;
            let steady_bits = steady_bits(&report.scheme, &c);
            rows.push(Row { text: name, report, bits_per_element, steady_bits });
            if let Some(out) = &args.out {
                write_reports(out, &rows)?;
            }
        }
    }
    Ok(rows)
}

/// llama.cpp's rows from `--reference` (default: fixtures/llamacpp-smollm2.json), none where the file is absent.
fn reference_rows(args: &Args) -> anyhow::Result<Vec<ReferencePpl>> {
    let reference_path = args.reference.clone().unwrap_or_else(llamacpp_reference_file);
    match reference_path.exists() {
        true => load_reference_ppl(&reference_path)
            .with_context(|| format!("malformed reference file {}", reference_path.display())),
        false => {
            eprintln!("no llama.cpp reference at {}: its rows are left out", reference_path.display());
            Ok(Vec::new())
        }
    }
}

/// The texts of `rows`, in order.
fn texts(rows: &[Row]) -> Vec<&str> {
    let mut texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
    texts.dedup();
    texts
}

/// The rows of a `<out>.json` file, their bits per element from the model's KV geometry.
fn rows_from_json(json: &Path, args: &Args) -> anyhow::Result<Vec<Row>> {
    let text = std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let reports: Vec<(String, PerplexityReport)> =
        serde_json::from_str(&text).with_context(|| format!("{} is not a perplexity report file", json.display()))?;
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let device = Default::default();
    let loaded = load_model::<burn_kvcompress::backend::NdArray>(&path, &device)
        .with_context(|| format!("loading {} (run `cargo xtask fetch-model`)", path.display()))?;
    let elements_per_token = elements_per_token(loaded.model.config());
    Ok(reports
        .into_iter()
        .map(|(text, report)| Row {
            text,
            bits_per_element: report.kv_bytes_per_token * 8.0 / elements_per_token,
            steady_bits: steady_bits(&report.scheme, loaded.model.config()),
            report,
        })
        .collect())
}

/// The mean bits per element at [`STEADY_CONTEXT`] of the scheme named `name` (its `--kv`
/// spelling), where its format gives it.
fn steady_bits(name: &str, c: &burn_kvcompress::model::ModelConfig) -> Option<f64> {
    name.parse::<SchemeSpec>().ok()?.mean_bits_per_element(c, STEADY_CONTEXT)
}

/// Cached K and V elements per token, all layers.
fn elements_per_token(c: &burn_kvcompress::model::ModelConfig) -> f64 {
    (2 * c.num_layers * c.num_kv_heads * c.head_dim) as f64
}

fn table(rows: &[Row], reference: &[ReferencePpl]) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| text | KV cache | bits/elem at window end | bits/elem at 8K | ppl | vs dense | vs llama.cpp f32 | mean KL vs dense | \
         scored tokens | prefill tok/s | decode tok/s |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    let bits = |b: Option<f64>| b.map_or(String::new(), |b| format!("{b:.2}"));
    for text in texts(rows) {
        let f32_ref = reference.iter().find(|r| r.text == text && r.kv_type == "f32").map(|r| r.ppl);
        let dense = rows.iter().find(|r| r.text == text && r.report.scheme == "dense").map(|r| r.report.ppl);
        let delta =
            |ppl: f64, to: Option<f64>| to.map_or(String::new(), |f| format!("{:+.2}%", 100.0 * (ppl / f - 1.0)));
        for row in rows.iter().filter(|r| r.text == text) {
            let r = &row.report;
            writeln!(
                out,
                "| {text} | {} (ours) | {:.2} | {} | {:.4} | {} | {} | {} | {} | {:.1} | {:.1} |",
                r.scheme,
                row.bits_per_element,
                bits(row.steady_bits),
                r.ppl,
                delta(r.ppl, dense),
                delta(r.ppl, f32_ref),
                r.mean_kl.map_or(String::new(), |kl| format!("{kl:.5}")),
                r.scored_tokens,
                r.prefill_tokens_per_second,
                r.decode_tokens_per_second
            )?;
        }
        for r in reference.iter().filter(|r| r.text == text) {
            let b = bits(llamacpp_bits_per_element(&r.kv_type));
            writeln!(
                out,
                "| {text} | llama.cpp {} | {b} | {b} | {:.4} | {} | {} | | {} | | |",
                r.kv_type,
                r.ppl,
                delta(r.ppl, dense),
                delta(r.ppl, f32_ref),
                r.scored_tokens
            )?;
        }
    }
    Ok(out)
}

/// Writes each text's perplexity against bits per element to `path` (one text) or
/// `<stem>-<text>.<ext>` beside it (several).
fn plot(rows: &[Row], reference: &[ReferencePpl], path: &Path) -> anyhow::Result<()> {
    let texts = texts(rows);
    for text in &texts {
        let ours = rows.iter().filter(|r| r.text == *text).map(|r| TradeoffPoint {
            family: scheme_family(&r.report.scheme),
            bits_per_element: r.steady_bits.unwrap_or(r.bits_per_element),
            ppl: r.report.ppl,
        });
        let theirs = reference.iter().filter(|r| r.text == *text).filter_map(|r| {
            llamacpp_bits_per_element(&r.kv_type).map(|bits| TradeoffPoint {
                family: "llama.cpp".into(),
                bits_per_element: bits,
                ppl: r.ppl,
            })
        });
        let points: Vec<TradeoffPoint> = ours.chain(theirs).collect();
        let file = match texts.len() {
            1 => path.to_path_buf(),
            _ => {
                let stem = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                let text_stem =
                    Path::new(text).file_stem().map_or_else(|| text.to_string(), |s| s.to_string_lossy().into_owned());
                let ext = path.extension().map_or_else(String::new, |e| format!(".{}", e.to_string_lossy()));
                path.with_file_name(format!("{stem}-{text_stem}{ext}"))
            }
        };
        plot_tradeoff(&file, text, &points)?;
        eprintln!("wrote {}", file.display());
    }
    Ok(())
}

/// Writes the raw reports of `rows` to `<out>.json`; called after every row, so an interrupted
/// run keeps the rows it finished (`--replot` draws them).
fn write_reports(out: &Path, rows: &[Row]) -> anyhow::Result<()> {
    create_parent(out)?;
    let reports: Vec<(&str, &PerplexityReport)> = rows.iter().map(|r| (r.text.as_str(), &r.report)).collect();
    std::fs::write(out.with_extension("json"), serde_json::to_string_pretty(&reports)?)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.plot {
        kvcompress_cli::plot::PlotFormat::of_path(path)?;
    }
    let reference = reference_rows(&args)?;
    let (rows, produced) = match &args.replot {
        Some(json) => (rows_from_json(json, &args)?, format!("Rendered from `{}`", json.display())),
        None => (
            with_backend!(args.backend, run(&args))?,
            format!("Produced by `cargo xtask eval` on backend {:?}", args.backend),
        ),
    };
    let table = table(&rows, &reference)?;
    println!("{table}");
    if let Some(out) = &args.out {
        // The JSON is written as the rows finish (`run`); a replot renders one already written.
        create_parent(out)?;
        let header = format!(
            "Decode-perplexity (1024-token windows, prefill 512, 512 scored one at a time). {produced}. \
             Bits per element: at the window's end, what the caches hold after 1023 tokens (all metadata \
             and float slots, measured); at 8K, the format's mean cost at an 8192-token context (metadata \
             and float slots amortized; dense and HACK only). Mean KL: of each scored position's \
             next-token distribution from the dense (f32) run's, in nats.\n\n"
        );
        std::fs::write(out.with_extension("md"), header + &table)?;
    }
    if let Some(path) = &args.plot {
        plot(&rows, &reference, path)?;
    }
    Ok(())
}
