//! Calibrated rotations: orthogonal, and truncating a head's stacked samples to rank k loses
//! exactly the norm of the dropped singular values.

use crate::common::*;
use burn_kvcompress::{cache::LayerRecording, fingerprint::ModelFingerprint};
use burn_zack::{
    rotation::{
        calibrate_rotations, BlockWeighting, Centering, GramAccumulator, HeadRotation, Pair, RotationConfig,
        RotationGeometry, ValueSamples,
    },
    ZackError,
};

/// `‖M − M R̃ R̃ᵀ‖_F` for rows `m` of length `d`, `R̃` the first `k` columns of `rotation`.
fn truncation_error(rows: &[Vec<f64>], rotation: &HeadRotation, k: usize) -> f64 {
    let d = rotation.head_dim();
    let r = |i: usize, j: usize| f64::from(rotation.basis[i * d + j]);
    let mut error = 0.0;
    for row in rows {
        let coords: Vec<f64> = (0..k).map(|j| (0..d).map(|i| row[i] * r(i, j)).sum()).collect();
        for (i, x) in row.iter().enumerate() {
            let projected: f64 = (0..k).map(|j| coords[j] * r(i, j)).sum();
            error += (x - projected).powi(2);
        }
    }
    error.sqrt()
}

fn dropped_norm(rotation: &HeadRotation, k: usize) -> f64 {
    rotation.singular_values[k..].iter().map(|&s| f64::from(s).powi(2)).sum::<f64>().sqrt()
}

/// Rows of KV head `kv_head`'s vectors in `tensors`, each scaled by `scale`.
fn rows_of(
    tensors: &[burn_kvcompress::cache::RecordedTensor],
    heads: std::ops::Range<usize>,
    scale: f64,
) -> Vec<Vec<f64>> {
    heads
        .flat_map(|h| {
            tensors
                .iter()
                .flat_map(move |t| t.head_vectors(h).map(move |v| v.iter().map(|&x| f64::from(x) * scale).collect()))
        })
        .collect()
}

/// `rows` minus their mean.
fn centered(rows: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    let n = rows.len() as f64;
    let mean: Vec<f64> = (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i]).sum::<f64>() / n).collect();
    rows.into_iter().map(|r| r.iter().zip(&mean).map(|(x, m)| x - m).collect()).collect()
}

fn energy(rows: &[Vec<f64>]) -> f64 {
    rows.iter().flatten().map(|x| x * x).sum()
}

#[test]
fn truncating_the_stacked_centered_samples_loses_the_dropped_singular_values() {
    let model = tiny_llama();
    let geometry = RotationGeometry::of_model(model.config());
    let recordings = synthetic_recordings(geometry, 50, 11);
    let mut grams = GramAccumulator::new(geometry);
    grams.add(&recordings).unwrap();
    let d = geometry.head_dim;
    let configs = [
        RotationConfig {
            weighting: BlockWeighting::Concatenate,
            centering: Centering::None,
            value_samples: ValueSamples::Values,
        },
        RotationConfig::default(),
        RotationConfig {
            weighting: BlockWeighting::EqualEnergy,
            centering: Centering::KeysAndValues,
            value_samples: ValueSamples::Values,
        },
    ];
    for config in configs {
        let weighting = config.weighting;
        let rotations =
            calibrate_rotations(&grams, &model, config, ModelFingerprint::of_bytes(b"t"), String::new()).unwrap();
        for layer in [0, 2] {
            let rec: &LayerRecording = &recordings[layer];
            let w_o = host(model.layers[layer].attention.o_proj.weight.val());
            let hidden = w_o.len() / (geometry.heads * d);
            for kv_head in 0..geometry.kv_heads {
                let queries = kv_head * geometry.group()..(kv_head + 1) * geometry.group();
                let q = rows_of(&rec.queries, queries.clone(), 1.0);
                let k = rows_of(&rec.keys, kv_head..kv_head + 1, 1.0);
                let v = match config.value_samples {
                    ValueSamples::Values => rows_of(&rec.values, kv_head..kv_head + 1, 1.0),
                    ValueSamples::Outputs => rows_of(&rec.outputs, queries.clone(), 1.0),
                };
                let (k, v) = match config.centering {
                    Centering::None => (k, v),
                    Centering::Values => (k, centered(v)),
                    Centering::KeysAndValues => (centered(k), centered(v)),
                };
                // W_O^hᵀ rows: the `hidden` columns of each query head's d x hidden block.
                let w_o = &w_o;
                let o: Vec<Vec<f64>> = queries
                    .flat_map(|h| {
                        (0..hidden).map(move |c| (0..d).map(|i| f64::from(w_o[(h * d + i) * hidden + c])).collect())
                    })
                    .collect();
                let scale = |rows: &[Vec<f64>]| match weighting {
                    BlockWeighting::Concatenate => 1.0,
                    BlockWeighting::EqualEnergy => 1.0 / energy(rows).sqrt(),
                };
                let stack = |a: &[Vec<f64>], b: &[Vec<f64>]| -> Vec<Vec<f64>> {
                    let (sa, sb) = (scale(a), scale(b));
                    a.iter()
                        .map(|r| r.iter().map(|x| x * sa).collect())
                        .chain(b.iter().map(|r| r.iter().map(|x| x * sb).collect()))
                        .collect()
                };
                for (pair, stacked) in [(Pair::QueryKey, stack(&q, &k)), (Pair::ValueOutput, stack(&v, &o))] {
                    let rotation = rotations.head(pair, layer, kv_head);
                    let total = energy(&stacked).sqrt();
                    for rank in [1, 5, d - 1, d] {
                        let (error, expected) =
                            (truncation_error(&stacked, rotation, rank), dropped_norm(rotation, rank));
                        assert!(
                            (error - expected).abs() <= 1e-5 * total,
                            "{config} {pair:?} layer {layer} head {kv_head} rank {rank}: {error} vs {expected}"
                        );
                    }
                    // Orthonormal columns (f32 storage of an f64 eigenbasis).
                    for i in 0..d {
                        for j in 0..d {
                            let dot: f32 = (0..d).map(|r| rotation.basis[r * d + i] * rotation.basis[r * d + j]).sum();
                            assert!((dot - f32::from(u8::from(i == j))).abs() < 1e-5, "RᵀR[{i}][{j}] = {dot}");
                        }
                    }
                    assert!(rotation.singular_values.windows(2).all(|w| w[0] >= w[1]));
                }
            }
        }
    }
}

#[test]
fn the_paper_weighting_lets_the_larger_block_decide() {
    // Keys 100x larger than queries: unweighted, the leading direction is the keys' alone.
    let model = tiny_llama();
    let geometry = RotationGeometry::of_model(model.config());
    let mut recordings = synthetic_recordings(geometry, 30, 5);
    for layer in &mut recordings {
        layer.keys[0].values.iter_mut().for_each(|x| *x *= 100.0);
        // Queries put their energy in the trailing coordinates, keys in the leading ones.
        layer.queries[0].values.chunks_exact_mut(geometry.head_dim).for_each(<[f32]>::reverse);
    }
    let mut grams = GramAccumulator::new(geometry);
    grams.add(&recordings).unwrap();
    let fingerprint = ModelFingerprint::of_bytes(b"t");
    let config = |weighting| RotationConfig { weighting, centering: Centering::None, ..RotationConfig::default() };
    let plain =
        calibrate_rotations(&grams, &model, config(BlockWeighting::Concatenate), fingerprint, String::new()).unwrap();
    let equal =
        calibrate_rotations(&grams, &model, config(BlockWeighting::EqualEnergy), fingerprint, String::new()).unwrap();
    let keys_only: Vec<Vec<f64>> = rows_of(&recordings[0].keys, 0..1, 1.0);
    let queries: Vec<Vec<f64>> = rows_of(&recordings[0].queries, 0..2, 1.0);
    let share = |rotation: &HeadRotation, rows: &[Vec<f64>]| {
        1.0 - (truncation_error(rows, rotation, 4) / energy(rows).sqrt()).powi(2)
    };
    // The query energy the first 4 directions keep is higher when queries weigh as much as keys.
    let (p, e) = (share(plain.head(Pair::QueryKey, 0, 0), &queries), share(equal.head(Pair::QueryKey, 0, 0), &queries));
    assert!(e > p, "equal-energy keeps {e} of the queries, concatenation {p}");
    assert!(share(plain.head(Pair::QueryKey, 0, 0), &keys_only) >= share(equal.head(Pair::QueryKey, 0, 0), &keys_only));
}

#[test]
fn bad_recordings_and_mismatched_models_are_typed_errors() {
    let model = tiny_llama();
    let geometry = RotationGeometry::of_model(model.config());
    let mut grams = GramAccumulator::new(geometry);
    let fingerprint = ModelFingerprint::of_bytes(b"t");
    assert!(matches!(
        calibrate_rotations(&grams, &model, RotationConfig::default(), fingerprint, String::new()),
        Err(ZackError::Calibration(_))
    ));
    let mut no_queries = synthetic_recordings(geometry, 4, 1);
    no_queries.iter_mut().for_each(|l| {
        l.queries.clear();
        l.outputs.clear();
    });
    assert!(matches!(grams.add(&no_queries), Err(ZackError::Calibration(_))));
    assert!(matches!(grams.add(&synthetic_recordings(geometry, 4, 1)[..2]), Err(ZackError::Calibration(_))));
    let other = RotationGeometry { head_dim: 8, ..geometry };
    let mut wrong = GramAccumulator::new(other);
    assert!(matches!(wrong.add(&synthetic_recordings(geometry, 4, 1)), Err(ZackError::Calibration(_))));
    wrong.add(&synthetic_recordings(other, 4, 1)).unwrap();
    assert!(matches!(
        calibrate_rotations(&wrong, &model, RotationConfig::default(), fingerprint, String::new()),
        Err(ZackError::GeometryMismatch { .. })
    ));
    let rotations = calibrated(&model, RotationConfig::default());
    assert!(rotations.check_model(ModelFingerprint::of_bytes(b"tiny"), model.config()).is_ok());
    assert!(matches!(
        rotations.check_model(ModelFingerprint::of_bytes(b"other"), model.config()),
        Err(ZackError::ModelMismatch { .. })
    ));
}
