//! `cargo xtask eval`: the decode-perplexity table, written under `results/`.

use clap::Args;

use crate::{fetch_model, shell};

/// Arguments of `cargo xtask eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// KV schemes to evaluate (repeatable), in the `--kv` syntax of the perplexity example.
    #[arg(long = "kv", default_value = "dense")]
    schemes: Vec<String>,
    /// Evaluation texts (repeatable).
    #[arg(long = "text", default_values = ["data/tempest.txt", "data/gpl-3.txt"])]
    texts: Vec<String>,
    /// Output path without extension: `<out>.md` (table), `<out>.json` (raw reports) and
    /// `<out>.svg` (perplexity against bits per element; with several texts `<out>-<text>.svg`).
    /// A grid writes one table and plot per evaluated text, `<out>-<text>.md/.json/.svg`.
    /// Default: `results/perplexity`, for a grid `results/<hack|pq|zack>-perplexity`.
    #[arg(long)]
    out: Option<String>,
    /// Backend: flex (the fast CPU backend), ndarray, wgpu or cuda (the latter two build the
    /// command-line programs with their feature).
    #[arg(long, default_value = "flex")]
    backend: String,
    /// Add HACK's grid after the `--kv` schemes: the paper's axes and the channel axes at 2 and 4
    /// bits, with rotation, sinks and window, and clipping alone and combined, and key/value bit
    /// widths apart (19 configurations; see `HACK_GRID` in `xtask/src/eval.rs`).
    #[arg(long)]
    hack_grid: bool,
    /// Evaluate MILLION's grid instead: PQ (m, nbits) in {(32, 8), (32, 6), (16, 8)} (4, 3.5 and 2
    /// stored code bits per element at head dim 64) × recent window {0, 64}, beside dense. Each
    /// text is evaluated with codebooks calibrated on the other texts (never on itself); the
    /// codebooks and their training reports go to `target/pq-books/`, the k-means plots to
    /// `results/pq-kmeans/`, and one table per evaluated text to `<out>-<text>.md/.json`.
    #[arg(long, conflicts_with = "hack_grid")]
    pq_grid: bool,
    /// Evaluate ZACK's grid instead: overall compression rates {0.125, 0.25, 0.375, 0.5} with the
    /// default rotations (equal-energy blocks, attention outputs as value samples, centered), and
    /// rates {0.25, 0.5} with the paper's construction (plain stacking of raw values) and with
    /// centered values instead of outputs, and the default rotations at rates {0.25, 0.5} followed
    /// by HACK quantization (4 and 2 bits, Π = 64) and by product quantization (`sub_dim=2,nbits=8`
    /// and `sub_dim=4,nbits=8`: 4 and 2 code bits per kept element, window 64, codebooks
    /// calibrated at each rate), beside dense. Each text is evaluated with
    /// rotations calibrated on the other texts; the rotations
    /// and codebooks and their reports go to `target/zack-rotations/`, the spectra plots to
    /// `results/zack-spectra/` (the codebooks' k-means plots to `results/zack-pq-kmeans/`), and
    /// one table per evaluated text to `<out>-<text>.md/.json`.
    #[arg(long, conflicts_with_all = ["hack_grid", "pq_grid"])]
    zack_grid: bool,
    /// Print the perplexity command instead of running it (to run its binary elsewhere, e.g. a
    /// CUDA build on a GPU machine without a Rust toolchain).
    #[arg(long)]
    print_only: bool,
}

impl EvalArgs {
    /// `--out`, else `default`.
    fn out_or(&self, default: &str) -> String {
        self.out.clone().unwrap_or_else(|| default.to_string())
    }
}

/// HACK's evaluation grid in the `--kv` syntax: each remedy alone and combined, at 2 bits, with
/// split key/value widths, and at 4 bits (round to nearest throughout; the paper's stochastic
/// rounding was worse at every setting, `results/hack-perplexity.md` of commit 3fba7c5).
const HACK_GRID: [&str; 19] = [
    // The paper's axes, without and with rotation.
    "hack:bits=2,pi=64,round=nearest",
    "hack:bits=2,pi=64,round=nearest,rot=hadamard",
    // The channel axes, each remedy alone.
    "hack:bits=2,pi=64,round=nearest,axes=channel",
    "hack:bits=2,pi=64,round=nearest,axes=channel,rot=hadamard",
    "hack:bits=2,pi=64,round=nearest,axes=channel,sinks=4,window=64",
    "hack:bits=2,pi=64,round=nearest,axes=channel,clip=mse",
    // Combined.
    "hack:bits=2,pi=64,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64",
    "hack:bits=2,pi=64,round=nearest,axes=channel,rot=hadamard,clip=mse",
    "hack:bits=2,pi=64,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    "hack:bits=2,pi=32,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    "hack:bits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    // Key and value widths apart.
    "hack:kbits=4,vbits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    "hack:kbits=2,vbits=4,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
    // 4 bits: the paper's best row, then the channel axes with each remedy added.
    "hack:bits=4,pi=32,round=nearest",
    "hack:bits=4,pi=128,round=nearest,axes=channel",
    "hack:bits=4,pi=128,round=nearest,axes=channel,rot=hadamard",
    "hack:bits=4,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4",
    "hack:bits=4,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,clip=mse",
    "hack:bits=4,pi=64,round=nearest,axes=channel,rot=hadamard,sinks=4",
];

/// MILLION's evaluation grid: PQ configurations and recent windows.
const PQ_CONFIGS: [&str; 3] = ["m=32,nbits=8", "m=32,nbits=6", "m=16,nbits=8"];
const PQ_WINDOWS: [usize; 2] = [0, 64];

/// ZACK's evaluation grid: rotation configurations (tag, `--config`) and the compression rates
/// of each (the default configuration first, over more rates).
const ZACK_CONFIGS: [(&str, &str); 3] = [
    ("default", "weighting=equal-energy,center=values,samples=outputs"),
    ("paper", "weighting=concatenate,center=none,samples=values"),
    ("value-samples", "weighting=equal-energy,center=values,samples=values"),
];
const ZACK_RATES: [f64; 4] = [0.125, 0.25, 0.375, 0.5];
const ZACK_VARIANT_RATES: [f64; 2] = [0.25, 0.5];
/// HACK quantizations composed after the default ZACK rotations (at [`ZACK_VARIANT_RATES`]).
const ZACK_COMPOSED: [&str; 2] = ["hack:bits=4,pi=64", "hack:bits=2,pi=64"];
/// Product quantizers of the reduced dimensions composed after the default ZACK rotations (at
/// [`ZACK_VARIANT_RATES`], codebooks calibrated per rate, window [`ZACK_PQ_WINDOW`]): 4 and 2
/// code bits per kept element.
const ZACK_COMPOSED_PQ: [&str; 2] = ["sub_dim=2,nbits=8", "sub_dim=4,nbits=8"];
const ZACK_PQ_WINDOW: usize = 64;

/// `cargo run` of an example binary on the chosen backend, up to and including `--backend`.
fn example(bin: &str, backend: &str) -> Vec<String> {
    let mut cmd: Vec<String> = ["run", "--release", "-p", "kvcompress-cli", "--bin", bin].map(String::from).to_vec();
    if matches!(backend, "wgpu" | "cuda") {
        cmd.extend(["--features".to_string(), backend.to_string()]);
    }
    cmd.extend(["--".to_string(), "--backend".to_string(), backend.to_string()]);
    cmd
}

/// The file stem of a path (`data/gpl-3.txt` -> `gpl-3`).
fn stem(path: &str) -> String {
    std::path::Path::new(path).file_stem().map_or_else(|| path.to_string(), |s| s.to_string_lossy().into_owned())
}

/// Runs (or prints) each command in order.
fn run_all(commands: Vec<Vec<String>>, print_only: bool) -> anyhow::Result<()> {
    for cmd in commands {
        if print_only {
            println!("cargo {}", cmd.join(" "));
        } else {
            let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
            shell::run("cargo", &refs)?;
        }
    }
    Ok(())
}

/// The artifact path of a calibration's tag on the text being calibrated.
type ArtifactOf<'a> = &'a dyn Fn(&str) -> String;

/// One calibration of a grid: a tag for file names, the directory under `results/` of its plot,
/// and the `calibrate` arguments, given the artifact paths of other calibrations on the same text
/// (earlier in the list).
struct Calibration {
    tag: String,
    plots: &'static str,
    args: Box<dyn Fn(ArtifactOf<'_>) -> Vec<String>>,
}

impl Calibration {
    /// A calibration whose arguments do not depend on other artifacts.
    fn fixed(tag: String, plots: &'static str, args: Vec<String>) -> Self {
        Self { tag, plots, args: Box::new(move |_| args.clone()) }
    }
}

/// A cross-calibrated grid: each calibration runs on every text (artifact
/// `<dir>/<text>-<tag>.safetensors`, plot `results/<its plots>/<text>-<tag>.svg`), then each text is
/// evaluated with `kv` given the artifact path of a calibration on another text.
fn cross_grid(
    args: &EvalArgs,
    name: &str,
    dir: &str,
    calibrations: &[Calibration],
    kv: impl Fn(&dyn Fn(&str) -> String) -> Vec<String>,
) -> anyhow::Result<Vec<Vec<String>>> {
    anyhow::ensure!(
        args.texts.len() >= 2,
        "--{name}-grid calibrates each text's scheme on the other texts: give two or more"
    );
    let artifact = |text: &str, tag: &str| format!("{dir}/{}-{tag}.safetensors", stem(text));
    let mut commands = Vec::new();
    for calibration in calibrations {
        for text in &args.texts {
            let mut cmd = example("calibrate", &args.backend);
            cmd.extend((calibration.args)(&|tag| artifact(text, tag)));
            let plot = format!("results/{}/{}-{}.svg", calibration.plots, stem(text), calibration.tag);
            let out = artifact(text, &calibration.tag);
            cmd.extend(["--text", text, "--tokens", "8192", "--out", &out, "--plot", &plot].map(String::from));
            commands.push(cmd);
        }
    }
    for text in &args.texts {
        let calibration_text = args.texts.iter().find(|t| *t != text).expect("two texts");
        let mut cmd = example("perplexity", &args.backend);
        cmd.extend(["--kv".to_string(), "dense".to_string()]);
        for scheme in kv(&|tag| artifact(calibration_text, tag)) {
            cmd.extend(["--kv".to_string(), scheme]);
        }
        let out = format!("{}-{}", args.out_or(&format!("results/{name}-perplexity")), stem(text));
        cmd.extend(["--text".to_string(), text.clone(), "--plot".to_string(), format!("{out}.svg")]);
        cmd.extend(["--out".to_string(), out]);
        commands.push(cmd);
    }
    Ok(commands)
}

/// MILLION's grid: codebooks calibrated on the other texts, then one perplexity table per text.
fn pq_grid(args: &EvalArgs) -> anyhow::Result<Vec<Vec<String>>> {
    let tag = |config: &str| config.replace([',', '='], "_");
    let calibrations: Vec<Calibration> = PQ_CONFIGS
        .iter()
        .map(|config| Calibration::fixed(tag(config), "pq-kmeans", vec!["--config".into(), config.to_string()]))
        .collect();
    cross_grid(args, "pq", "target/pq-books", &calibrations, |books| {
        PQ_CONFIGS
            .iter()
            .flat_map(|config| PQ_WINDOWS.map(|window| format!("pq:codebooks={},window={window}", books(&tag(config)))))
            .collect()
    })
}

/// ZACK's grid: rotations (each configuration) calibrated on the other texts, at several rates.
fn zack_grid(args: &EvalArgs) -> anyhow::Result<Vec<Vec<String>>> {
    let default = ZACK_CONFIGS[0].0;
    let pq_tag = |config: &str, rate: f64| format!("{default}-r{rate}-{}", config.replace([',', '='], "_"));
    let rotations = ZACK_CONFIGS.iter().map(|(tag, config)| {
        Calibration::fixed(
            tag.to_string(),
            "zack-spectra",
            ["--scheme", "zack", "--config", config].map(String::from).to_vec(),
        )
    });
    let reduced_books = ZACK_COMPOSED_PQ.into_iter().flat_map(|config| {
        ZACK_VARIANT_RATES.iter().map(move |&rate| Calibration {
            tag: pq_tag(config, rate),
            plots: "zack-pq-kmeans",
            args: Box::new(move |artifact| {
                let zack = format!("rotations={},rate={rate}", artifact(default));
                ["--scheme", "zack-pq", "--zack", &zack, "--config", config].map(String::from).to_vec()
            }),
        })
    });
    let calibrations: Vec<Calibration> = rotations.chain(reduced_books).collect();
    cross_grid(args, "zack", "target/zack-rotations", &calibrations, |rotations| {
        ZACK_CONFIGS
            .iter()
            .enumerate()
            .flat_map(|(i, (tag, _))| {
                let rates: &[f64] = if i == 0 { &ZACK_RATES } else { &ZACK_VARIANT_RATES };
                rates.iter().map(move |rate| format!("zack:rotations={},rate={rate}", rotations(tag)))
            })
            .chain(ZACK_COMPOSED.iter().flat_map(|hack| {
                let default = rotations(default);
                ZACK_VARIANT_RATES.iter().map(move |rate| format!("zack:rotations={default},rate={rate}+{hack}"))
            }))
            .chain(ZACK_COMPOSED_PQ.into_iter().flat_map(|config| {
                ZACK_VARIANT_RATES.iter().map(move |&rate| {
                    let books = rotations(&pq_tag(config, rate));
                    format!(
                        "zack:rotations={},rate={rate}+pq:codebooks={books},window={ZACK_PQ_WINDOW}",
                        rotations(default)
                    )
                })
            }))
            .collect()
    })
}

/// Runs the perplexity example over every text and scheme.
pub fn eval(args: EvalArgs) -> anyhow::Result<()> {
    // `calibrate` and `perplexity` create the directories of their artifacts and plots.
    if !args.print_only {
        fetch_model::fetch_model()?;
    }
    if args.pq_grid {
        return run_all(pq_grid(&args)?, args.print_only);
    }
    if args.zack_grid {
        return run_all(zack_grid(&args)?, args.print_only);
    }
    let mut cmd = example("perplexity", &args.backend);
    let grid: &[&str] = if args.hack_grid { &HACK_GRID } else { &[] };
    for kv in args.schemes.iter().map(String::as_str).chain(grid.iter().copied()) {
        cmd.extend(["--kv".to_string(), kv.to_string()]);
    }
    for text in &args.texts {
        cmd.extend(["--text".to_string(), text.clone()]);
    }
    let out = args.out_or(if args.hack_grid { "results/hack-perplexity" } else { "results/perplexity" });
    cmd.extend(["--plot".to_string(), format!("{out}.svg"), "--out".to_string(), out]);
    run_all(vec![cmd], args.print_only)
}
