//! `--scheme zack-pq`: k-means codebooks of ZACK's reduced keys and values.

use anyhow::Context;
use burn_kvcompress::model::ModelConfig;
use burn_kvschemes::compose::{train_reduced_codebooks, ReducedPqConfig, ReducedSamples};
use kvcompress_cli::{report::create_parent, with_backend};

use crate::pq::{finish, kmeans_bar, kmeans_settings, record_all, Trained};
use crate::record::{describe, read_texts};
use crate::Args;

pub fn run_zack_pq(args: &Args) -> anyhow::Result<()> {
    let text = args.config.as_deref().context("--scheme zack-pq needs --config sub_dim=N,nbits=BITS")?;
    let config: ReducedPqConfig = text.parse().with_context(|| format!("--config `{text}`"))?;
    let zack_text = args.zack.as_deref().context("--scheme zack-pq needs --zack rotations=FILE,rate=R")?;
    let mut zack_spec: burn_kvschemes::ZackSpec =
        zack_text.parse().map_err(|e: String| anyhow::anyhow!(e)).with_context(|| format!("--zack `{zack_text}`"))?;
    if zack_spec.rule.multiple == 1 {
        zack_spec.rule.multiple = config.sub_dim;
    }
    let (kmeans, threads) = kmeans_settings(args);
    let sources = read_texts(args)?;
    let check = |model: &ModelConfig| {
        anyhow::ensure!(
            model.head_dim.is_multiple_of(config.sub_dim),
            "sub_dim {} does not divide the head dimension {}",
            config.sub_dim,
            model.head_dim
        );
        Ok(())
    };
    let (recorded, layers) = with_backend!(args.backend, record_all(args, &check, &sources))?;
    let zack = zack_spec.resolve(&recorded.model_config, recorded.fingerprint)?;
    let samples = ReducedSamples::from_recordings(&layers, &zack)?;
    drop(layers);
    let subspaces: usize = samples.widths.iter().map(|[k, v]| (k + v) / config.sub_dim).sum();
    eprintln!(
        "recorded {} vectors per layer in {:.1} s; training {subspaces} subspaces x {} iterations ({config}, compression rate {:.3}), {threads} threads",
        samples.rows(),
        recorded.seconds,
        kmeans.iterations,
        zack.ranks().compression_rate()
    );
    let calibration = describe(&recorded, args.window);
    let bar = kmeans_bar(subspaces * kmeans.iterations);
    let trained = train_reduced_codebooks(
        &samples,
        config,
        &zack,
        &kmeans,
        recorded.fingerprint,
        calibration.clone(),
        threads,
        &|| bar.inc(1),
    );
    bar.finish_and_clear();
    let (books, report) = trained?;
    create_parent(&args.out)?;
    books.save(&args.out)?;
    let trained = Trained { config, config_text: config.to_string(), zack: Some(zack_text), kmeans, threads, report };
    finish(args, &recorded, &calibration, &trained)?;
    println!("use: --kv 'zack:{zack_text}+pq:codebooks={}'", args.out.display());
    Ok(())
}
