//! `--scheme pq`: k-means codebooks for MILLION.

use anyhow::Context;
use burn::tensor::backend::Backend;
use burn_kvcompress::{cache::LayerRecording, model::ModelConfig, paths::default_model_path};
use burn_million_pq::{
    codebook::{train_codebooks, CalibrationSamples, TrainingReport},
    KmeansConfig, PqConfig,
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

/// The JSON report written beside the codebooks (PQ's or ZACK + PQ's).
#[derive(Serialize)]
struct Report<'a, C: Serialize> {
    scheme: SchemeChoice,
    config: C,
    config_text: String,
    /// The ZACK part whose reduced coordinates were quantized (`zack-pq` only).
    zack: Option<&'a str>,
    kmeans: KmeansConfig,
    threads: usize,
    model: String,
    model_sha256: String,
    codebooks: String,
    calibration: &'a str,
    texts: Vec<ReportText<'a>>,
    tokens: usize,
    window: usize,
    recording_seconds: f64,
    training_seconds: f64,
    /// Per iteration (0 = after k-means++), pooled over layers and codebooks.
    relative_error: ReportCurves<'a>,
}

#[derive(Serialize)]
struct ReportText<'a> {
    name: &'a str,
    tokens: usize,
}

#[derive(Serialize)]
struct ReportCurves<'a> {
    keys: &'a [f64],
    values: &'a [f64],
}

/// Records K/V over the texts and keeps every layer's recordings (k-means samples from all),
/// after `check` accepted the model.
pub fn record_all<B: Backend>(
    device: B::Device,
    args: &Args,
    check: &dyn Fn(&ModelConfig) -> anyhow::Result<()>,
    sources: &[(String, String)],
) -> anyhow::Result<(Recorded, Vec<LayerRecording>)> {
    let mut layers: Vec<LayerRecording> = Vec::new();
    let (recorded, _) = record::<B>(device, args, check, sources, false, &mut |batch| {
        layers.resize_with(batch.len(), LayerRecording::default);
        for (all, new) in layers.iter_mut().zip(batch) {
            all.keys.extend(new.keys);
            all.values.extend(new.values);
        }
        Ok(())
    })?;
    Ok((recorded, layers))
}

/// A progress bar over `total` k-means iterations.
pub fn kmeans_bar(total: usize) -> ProgressBar {
    ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("k-means [{bar:30}] {pos}/{len} iterations, eta {eta}").expect("template"),
    )
}

/// The k-means settings of the flags, and the threads to train on.
pub fn kmeans_settings(args: &Args) -> (KmeansConfig, usize) {
    let kmeans = KmeansConfig {
        iterations: args.iterations,
        batch_size: args.batch_size,
        seed: args.seed,
        ..KmeansConfig::default()
    };
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    (kmeans, threads)
}

/// Trains the codebooks with a progress bar over every k-means iteration.
fn train(
    samples: &CalibrationSamples,
    config: PqConfig,
    kmeans: &KmeansConfig,
    recorded: &Recorded,
    calibration: &str,
    threads: usize,
) -> anyhow::Result<(burn_million_pq::codebook::Codebooks, TrainingReport)> {
    let g = samples.geometry;
    let total = g.layers * 2 * config.scope.groups(g.kv_heads) * config.subspaces * kmeans.iterations;
    let bar = kmeans_bar(total);
    eprintln!(
        "training {config} codebooks for {g}: {} vectors per KV head, {} k-means x {} iterations, {threads} threads",
        samples.rows_per_head(),
        total / kmeans.iterations.max(1),
        kmeans.iterations
    );
    let result =
        train_codebooks(samples, config, kmeans, recorded.fingerprint, calibration.to_string(), threads, &|| {
            bar.inc(1)
        });
    bar.finish_and_clear();
    Ok(result?)
}

pub fn run_pq(args: &Args) -> anyhow::Result<()> {
    let text = args.config.as_deref().context("--scheme pq needs --config m=SUBSPACES,nbits=BITS")?;
    let config: PqConfig = text.parse().with_context(|| format!("--config `{text}`"))?;
    let (kmeans, threads) = kmeans_settings(args);
    let sources = read_texts(args)?;
    let check = |model: &ModelConfig| Ok(config.validate(model.head_dim)?);
    let (recorded, layers) = with_backend!(args.backend, record_all(args, &check, &sources))?;
    let samples = CalibrationSamples::from_recordings(&layers)?;
    let c = &recorded.model_config;
    eprintln!(
        "recorded {} layers x {} KV heads x {} vectors in {:.1} s",
        c.num_layers,
        c.num_kv_heads,
        samples.rows_per_head(),
        recorded.seconds
    );
    let calibration = describe(&recorded, args.window);
    let (books, report) = train(&samples, config, &kmeans, &recorded, &calibration, threads)?;
    create_parent(&args.out)?;
    books.save(&args.out)?;
    let trained = Trained { config, config_text: config.to_string(), zack: None, kmeans, threads, report };
    finish(args, &recorded, &calibration, &trained)
}

/// What a k-means calibration ran with and how it went.
pub struct Trained<'a, C: Serialize> {
    pub config: C,
    pub config_text: String,
    pub zack: Option<&'a str>,
    pub kmeans: KmeansConfig,
    pub threads: usize,
    pub report: TrainingReport,
}

/// Prints the outcome of codebooks saved to `args.out`, writes the JSON report beside them and
/// the `--plot` of the relative reconstruction error per k-means iteration.
pub fn finish<C: Serialize>(
    args: &Args,
    recorded: &Recorded,
    calibration: &str,
    trained: &Trained<'_, C>,
) -> anyhow::Result<()> {
    let [keys, values] = &trained.report.relative_error;
    let config_text = &trained.config_text;
    let last = |curve: &[f64]| curve.last().copied().unwrap_or(f64::NAN);
    println!("codebooks: {} ({config_text}, calibrated on {calibration})", args.out.display());
    println!("training: {:.1} s", trained.report.seconds);
    println!("relative reconstruction error: keys {:.5}, values {:.5}", last(keys), last(values));

    let model = args.model.clone().unwrap_or_else(default_model_path);
    let json = Report {
        scheme: args.scheme,
        config: &trained.config,
        config_text: config_text.clone(),
        zack: trained.zack,
        kmeans: trained.kmeans,
        threads: trained.threads,
        model: model.display().to_string(),
        model_sha256: recorded.fingerprint.to_hex(),
        codebooks: args.out.display().to_string(),
        calibration,
        texts: recorded.taken.iter().map(|(name, tokens)| ReportText { name, tokens: *tokens }).collect(),
        tokens: recorded.taken.iter().map(|(_, n)| n).sum(),
        window: args.window,
        recording_seconds: recorded.seconds,
        training_seconds: trained.report.seconds,
        relative_error: ReportCurves { keys, values },
    };
    let json_path = write_json_beside(&args.out, &json)?;
    println!("report: {}", json_path.display());

    if let Some(plot) = &args.plot {
        let curves = [Curve { name: "keys", values: keys }, Curve { name: "values", values }];
        let title = match trained.zack {
            Some(zack) => format!("ZACK ({zack}) + PQ {config_text} on {calibration}"),
            None => format!("PQ {config_text} on {calibration}"),
        };
        let spec = PlotSpec {
            title: &title,
            x_label: "k-means iteration (0 = after k-means++)",
            y_label: "relative squared reconstruction error",
            curves: &curves,
        };
        plot_curves(plot, &spec)?;
        match PlotFormat::of_path(plot)? {
            PlotFormat::Svg => println!("plot: {}", plot.display()),
            PlotFormat::Png => println!(
                "plot: {} (no text in PNGs: keys {}, values {})",
                plot.display(),
                CURVE_COLOURS[0].0,
                CURVE_COLOURS[1].0
            ),
        }
    }
    Ok(())
}
