//! `--scheme zack`: ZACK's per-KV-head rotations.

use std::{sync::Arc, time::Instant};

use anyhow::Context;
use burn_kvcompress::{
    cache::DenseScheme,
    eval::{decode_perplexity, PerplexityConfig},
    loading::LoadedModel,
    paths::default_model_path,
};
use burn_zack::{
    cache::ZackScheme,
    kernels::ZackBackend,
    rotation::{calibrate_rotations, GramAccumulator, Pair, RotationConfig, Rotations},
    search_removal_rate, RankRule, Ranks, SearchPoint,
};
use indicatif::{ProgressBar, ProgressStyle};
use kvcompress_cli::{
    plot::{plot_curves, Curve, PlotFormat, PlotSpec, CURVE_COLOURS},
    report::{create_parent, write_json_beside},
    with_backend,
};
use serde::Serialize;

use crate::record::{describe, read_texts, record, Recorded};
use crate::{Args, SchemeChoice};

/// Removal rates ε the report tabulates.
const EPSILON_SWEEP: [f64; 9] = [0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4];

/// The JSON report written beside the rotations.
#[derive(Serialize)]
struct Report<'a> {
    scheme: SchemeChoice,
    config: RotationConfig,
    config_text: String,
    model: String,
    model_sha256: String,
    rotations: String,
    calibration: &'a str,
    tokens: usize,
    window: usize,
    recording_seconds: f64,
    svd_seconds: f64,
    /// Per pair, σ_j / σ_0 averaged over layers and KV heads, j = 0..head_dim.
    normalized_spectra: Spectra,
    /// Compression rate and mean ranks per removal rate ε (ranks at least 1).
    sweep: Vec<SweepRow>,
    /// The `--budget` search, if asked for.
    budget: Option<BudgetReport>,
}

/// The `--budget` search on held-out text.
#[derive(Serialize)]
struct BudgetReport {
    held_out: String,
    windows: usize,
    factor: f64,
    dense_ppl: f64,
    /// Largest ε within `factor · dense_ppl` (none if even the smallest tried was over).
    best: Option<Point>,
    points: Vec<Point>,
}

#[derive(Serialize)]
struct Point {
    epsilon: f64,
    compression_rate: f64,
    ppl: f64,
}

impl From<SearchPoint> for Point {
    fn from(p: SearchPoint) -> Self {
        Self { epsilon: p.epsilon, compression_rate: p.compression_rate, ppl: p.value }
    }
}

/// Largest ε searched, and bisection steps below it.
const SEARCH_MAX_EPSILON: f64 = 0.5;
const SEARCH_STEPS: usize = 6;

/// Searches the largest ε whose held-out perplexity is within `factor` of the dense model's.
fn search_budget<B: ZackBackend>(
    args: &Args,
    factor: f64,
    rotations: &Arc<Rotations>,
    loaded: &LoadedModel<B>,
    device: &B::Device,
) -> anyhow::Result<BudgetReport> {
    let path = args.held_out.as_ref().context("--budget needs --held-out")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let tokenizer = loaded.tokenizer.as_ref().context("the model files carry no tokenizer")?;
    let tokens = tokenizer.encode(&text, false)?;
    let windows = args.held_out_windows;
    let protocol = PerplexityConfig { max_windows: windows, batch: windows, ..PerplexityConfig::default() };
    let bar = ProgressBar::new(SEARCH_STEPS as u64 + 2).with_style(
        ProgressStyle::with_template("budget search [{bar:30}] {pos}/{len} perplexity runs {msg}").expect("template"),
    );
    let dense = decode_perplexity(&loaded.model, &DenseScheme, &tokens, protocol, device, |_, _| {})?.ppl;
    bar.inc(1);
    let budget = factor * dense;
    let search =
        search_removal_rate(rotations, RankRule::default(), budget, SEARCH_MAX_EPSILON, SEARCH_STEPS, |ranks| {
            let scheme = ZackScheme::new(rotations.clone(), ranks.clone())?;
            let model = scheme.fold(loaded.model.clone())?;
            let ppl = decode_perplexity(&model, &scheme, &tokens, protocol, device, |_, _| {})?.ppl;
            bar.inc(1);
            bar.set_message(format!("(rate {:.3}: ppl {ppl:.3}, budget {budget:.3})", ranks.compression_rate()));
            anyhow::Ok(ppl)
        })?;
    bar.finish_and_clear();
    Ok(BudgetReport {
        held_out: path.display().to_string(),
        windows,
        factor,
        dense_ppl: dense,
        best: search.best.map(Point::from),
        points: search.points.into_iter().map(Point::from).collect(),
    })
}

#[derive(Serialize)]
struct Spectra {
    query_key: Vec<f64>,
    value_output: Vec<f64>,
}

#[derive(Serialize)]
struct SweepRow {
    epsilon: f64,
    compression_rate: f64,
    mean_query_key_rank: f64,
    mean_value_output_rank: f64,
}

fn config(args: &Args) -> anyhow::Result<RotationConfig> {
    let text = args.config.as_deref().unwrap_or("");
    text.parse().with_context(|| format!("--config `{text}`"))
}

/// Records post-RoPE Q, K and V over the texts, accumulating Gram matrices batch by batch, then
/// computes the rotations (the SVD needs the model's `W_O`).
fn calibrate_on<B: ZackBackend>(
    device: B::Device,
    args: &Args,
    config: RotationConfig,
    sources: &[(String, String)],
) -> anyhow::Result<(Recorded, Rotations, f64, Option<BudgetReport>)> {
    let mut grams: Option<GramAccumulator> = None;
    let (recorded, loaded) = record::<B>(device.clone(), args, &|_| Ok(()), sources, true, &mut |batch| {
        match grams.as_mut() {
            Some(grams) => grams.add(&batch)?,
            None => grams = Some(GramAccumulator::from_recordings(&batch)?),
        }
        Ok(())
    })?;
    let grams = grams.context("no calibration text was recorded")?;
    let started = Instant::now();
    let calibration = describe(&recorded, args.window);
    let rotations = Arc::new(calibrate_rotations(&grams, &loaded.model, config, recorded.fingerprint, calibration)?);
    let svd_seconds = started.elapsed().as_secs_f64();
    let budget = match args.budget {
        Some(factor) => Some(search_budget(args, factor, &rotations, &loaded, &device)?),
        None => None,
    };
    let rotations = Arc::try_unwrap(rotations).unwrap_or_else(|shared| (*shared).clone());
    Ok((recorded, rotations, svd_seconds, budget))
}

/// σ_j / σ_0 of one pair, averaged over layers and KV heads.
fn mean_normalized_spectrum(rotations: &Rotations, pair: Pair) -> Vec<f64> {
    let g = rotations.geometry;
    let mut mean = vec![0.0; g.head_dim];
    for layer in 0..g.layers {
        for head in 0..g.kv_heads {
            let sigma = &rotations.head(pair, layer, head).singular_values;
            let top = f64::from(sigma[0]).max(f64::MIN_POSITIVE);
            for (m, &s) in mean.iter_mut().zip(sigma) {
                *m += f64::from(s) / top / (g.layers * g.kv_heads) as f64;
            }
        }
    }
    mean
}

fn sweep(rotations: &Rotations) -> anyhow::Result<Vec<SweepRow>> {
    let mean = |ranks: &[Vec<usize>]| {
        let all: Vec<usize> = ranks.iter().flatten().copied().collect();
        all.iter().sum::<usize>() as f64 / all.len().max(1) as f64
    };
    EPSILON_SWEEP
        .iter()
        .map(|&epsilon| {
            let ranks = Ranks::from_removal_rate(rotations, epsilon, RankRule::default())?;
            Ok(SweepRow {
                epsilon,
                compression_rate: ranks.compression_rate(),
                mean_query_key_rank: mean(&ranks.query_key),
                mean_value_output_rank: mean(&ranks.value_output),
            })
        })
        .collect()
}

pub fn run_zack(args: &Args) -> anyhow::Result<()> {
    let config = config(args)?;
    let sources = read_texts(args)?;
    let (recorded, rotations, svd_seconds, budget) = with_backend!(args.backend, calibrate_on(args, config, &sources))?;
    eprintln!("recorded Q/K/V of {} in {:.1} s", rotations.geometry, recorded.seconds);
    create_parent(&args.out)?;
    rotations.save(&args.out)?;
    println!("rotations: {} ({config}, calibrated on {})", args.out.display(), rotations.calibration);
    println!("SVD: {svd_seconds:.2} s");
    let rows = sweep(&rotations)?;
    println!("| ε | compression rate | mean rank q/k | mean rank v/o |\n|---:|---:|---:|---:|");
    for row in &rows {
        println!(
            "| {} | {:.3} | {:.1} | {:.1} |",
            row.epsilon, row.compression_rate, row.mean_query_key_rank, row.mean_value_output_rank
        );
    }
    let spectra = Spectra {
        query_key: mean_normalized_spectrum(&rotations, Pair::QueryKey),
        value_output: mean_normalized_spectrum(&rotations, Pair::ValueOutput),
    };
    let model = args.model.clone().unwrap_or_else(default_model_path);
    let report = Report {
        scheme: args.scheme,
        config,
        config_text: config.to_string(),
        model: model.display().to_string(),
        model_sha256: recorded.fingerprint.to_hex(),
        rotations: args.out.display().to_string(),
        calibration: &rotations.calibration,
        tokens: recorded.taken.iter().map(|(_, n)| n).sum(),
        window: args.window,
        recording_seconds: recorded.seconds,
        svd_seconds,
        normalized_spectra: spectra,
        sweep: rows,
        budget,
    };
    if let Some(budget) = &report.budget {
        println!("held-out dense perplexity {:.3} on {}; budget x{}", budget.dense_ppl, budget.held_out, budget.factor);
        for p in &budget.points {
            println!("  ε {:.4}: compression rate {:.3}, ppl {:.3}", p.epsilon, p.compression_rate, p.ppl);
        }
        match &budget.best {
            Some(p) => println!(
                "largest ε within budget: {:.4} (rate {:.3}): --kv zack:rotations={},eps={:.4}",
                p.epsilon,
                p.compression_rate,
                args.out.display(),
                p.epsilon
            ),
            None => println!("no ε within budget: even the smallest tried exceeds it"),
        }
    }
    let json = write_json_beside(&args.out, &report)?;
    println!("report: {}", json.display());

    if let Some(plot) = &args.plot {
        let s = &report.normalized_spectra;
        let curves = [
            Curve { name: "query/key", values: &s.query_key },
            Curve { name: "value/output", values: &s.value_output },
        ];
        let title = format!("ZACK mean singular values ({config}) on {}", rotations.calibration);
        let spec = PlotSpec {
            title: &title,
            x_label: "direction j (head dimension, sorted)",
            y_label: "σ_j / σ_0, mean over layers and KV heads",
            curves: &curves,
        };
        plot_curves(plot, &spec)?;
        match PlotFormat::of_path(plot)? {
            PlotFormat::Svg => println!("plot: {}", plot.display()),
            PlotFormat::Png => println!(
                "plot: {} (no text in PNGs: query/key {}, value/output {})",
                plot.display(),
                CURVE_COLOURS[0].0,
                CURVE_COLOURS[1].0
            ),
        }
    }
    Ok(())
}
