//! Rotation fine-tuning: its attention against the ZACK cache with folded values, orthogonality
//! after training, and a short run on the tiny Llama that must lower the held-out loss.

use std::sync::Arc;

use crate::common::{calibrated, host, tensor, tiny_llama, token_rows, Cpu};
use burn::{backend::Autodiff, tensor::Tensor};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme},
    finetune::{orthogonality_error, AttentionSamples, FinetuneConfig, FinetuneData, OutputProjections},
};
use burn_zack::{
    cache::{ZackCache, ZackScheme},
    finetune::{finetune_rotations, zack_attention_output, HeadBases},
    rotation::{Pair, RotationConfig, Rotations},
    RankRule, Ranks,
};

/// Training and held-out samples of the tiny Llama on seeded random tokens.
fn tiny_data(model: &burn_kvcompress::model::CausalLm<Cpu>) -> FinetuneData {
    let (layers, vocab, tokens) = (model.layers.len(), model.config().vocab_size, 40);
    let device = Default::default();
    let mut train = AttentionSamples::new(layers, tokens, 12).unwrap();
    train.record(model, &token_rows(4, tokens, vocab, 11), &device).unwrap();
    let mut held_out = AttentionSamples::new(layers, tokens, 12).unwrap();
    held_out.record(model, &token_rows(2, tokens, vocab, 12), &device).unwrap();
    FinetuneData { train, held_out, projections: OutputProjections::of_model(model) }
}

fn bases(rotations: &Rotations, ranks: &Ranks, layer: usize) -> Vec<HeadBases<Cpu>> {
    let d = rotations.geometry.head_dim;
    (0..rotations.geometry.kv_heads)
        .map(|h| {
            let basis = |pair| tensor(rotations.head(pair, layer, h).basis.clone(), [d, d]);
            HeadBases {
                query_key: basis(Pair::QueryKey),
                value_output: basis(Pair::ValueOutput),
                qk_rank: ranks.rank(Pair::QueryKey, layer, h),
                vo_rank: ranks.rank(Pair::ValueOutput, layer, h),
                value_mean: tensor(rotations.head(Pair::ValueOutput, layer, h).mean.clone(), [d]),
            }
        })
        .collect()
}

/// The training forward equals the ZACK cache fed the values the folded `W_V` produces (`v R`),
/// its zero-padded output taken back through `Rᵀ` with the dropped coordinates at their mean (the
/// folded `W_O` and its bias).
#[test]
fn training_attention_is_the_caches_attention_unfolded() {
    let model = tiny_llama();
    let data = tiny_data(&model);
    let rotations = Arc::new(calibrated(&model, RotationConfig::default()));
    let (ranks, _) = Ranks::for_compression_rate(&rotations, 0.5, RankRule::default()).unwrap();
    let scheme = ZackScheme::new(rotations.clone(), ranks.clone()).unwrap();
    let g = rotations.geometry;
    let (d, group) = (g.head_dim, g.group());
    let windows = [0, 2];
    for layer in 0..g.layers {
        let batch = data.train.batch::<Cpu>(layer, &windows, &Default::default());
        let got = host(zack_attention_output(&batch, &bases(&rotations, &ranks, layer)));

        let geometry = CacheGeometry { batch: windows.len(), kv_heads: g.kv_heads, heads: g.heads, head_dim: d };
        let mut cache: ZackCache<Cpu> = scheme.new_cache(layer, geometry, &Default::default());
        let r_vo: Vec<Tensor<Cpu, 2>> = (0..g.kv_heads)
            .map(|h| tensor(rotations.head(Pair::ValueOutput, layer, h).basis.clone(), [d, d]))
            .collect();
        let [n, kv, tokens, _] = batch.values.dims();
        let rotated: Vec<Tensor<Cpu, 4>> = (0..kv)
            .map(|h| {
                let v = batch.values.clone().narrow(1, h, 1).reshape([n, tokens, d]);
                v.matmul(r_vo[h].clone().reshape([1, d, d]).expand([n, d, d])).reshape([n, 1, tokens, d])
            })
            .collect();
        cache.append(batch.keys.clone(), Tensor::cat(rotated, 1)).unwrap();
        let options = AttendOptions { scale: 1.0 / (d as f32).sqrt(), key_start: vec![0; n], window: None };
        let padded = cache.attend(batch.queries.clone(), &options).unwrap();
        let rows = padded.dims()[2];
        let unfolded: Vec<Tensor<Cpu, 4>> = (0..kv)
            .map(|h| {
                let y = padded.clone().narrow(1, h * group, group).reshape([n, group * rows, d]);
                let back = y.matmul(r_vo[h].clone().transpose().reshape([1, d, d]).expand([n, d, d]));
                let rotation = rotations.head(Pair::ValueOutput, layer, h);
                let k = ranks.rank(Pair::ValueOutput, layer, h);
                let mean = tensor(rotation.mean.clone(), [1, d]);
                let kept = tensor(rotation.truncated_basis(k), [d, k]);
                let dropped = mean.clone() - mean.matmul(kept.clone()).matmul(kept.transpose());
                (back + dropped.reshape([1, 1, d])).reshape([n, group, rows, d])
            })
            .collect();
        let want = host(Tensor::cat(unfolded, 1));
        let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-4, "layer {layer}: {diff}");
    }
}

#[test]
fn a_short_run_lowers_the_held_out_loss_and_keeps_rotations_orthogonal() {
    let model = tiny_llama();
    let data = tiny_data(&model);
    let rotations = calibrated(&model, RotationConfig::default());
    let (ranks, epsilon) = Ranks::for_compression_rate(&rotations, 0.5, RankRule::default()).unwrap();
    let settings = FinetuneConfig { steps: 40, learning_rate: 3e-3, eval_every: 5, patience: 3, ..Default::default() };
    let (tuned, report) =
        finetune_rotations::<Autodiff<Cpu>>(&rotations, &ranks, &data, &settings, &Default::default(), &mut |_| {})
            .unwrap();
    eprintln!("held-out {} -> {} at step {}", report.initial_held_out, report.best_held_out, report.best_step);
    assert!(
        report.best_held_out < 0.95 * report.initial_held_out,
        "held-out output error {} -> {}",
        report.initial_held_out,
        report.best_held_out
    );
    assert!(report.best_step > 0 && tuned.calibration.contains("fine-tuned"));

    // Every basis is orthogonal to within 1e-5 (f32 storage of an f64 QR retraction).
    let d = rotations.geometry.head_dim;
    for pair in Pair::ALL {
        for layer in 0..rotations.geometry.layers {
            for h in 0..rotations.geometry.kv_heads {
                let (before, after) = (rotations.head(pair, layer, h), tuned.head(pair, layer, h));
                assert!(orthogonality_error(&after.basis, d) < 1e-5, "{pair:?} {layer} {h}");
                assert_eq!((&before.singular_values, &before.mean), (&after.singular_values, &after.mean));
            }
        }
    }
    assert_ne!(tuned.digest(), rotations.digest());
    // Same spectrum, same ranks at the same rate: the file serves the ranks it was trained for.
    assert_eq!(Ranks::from_removal_rate(&tuned, epsilon, RankRule::default()).unwrap(), ranks);

    let path = std::env::temp_dir().join(format!("zack-finetune-{}.safetensors", std::process::id()));
    tuned.save(&path).unwrap();
    let loaded = Rotations::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(loaded, tuned);
}
