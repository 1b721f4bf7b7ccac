//! HACK's K/V stores: cached sums equal recomputed sums (SE), the float tail holds exactly the
//! tokens of the open block (RQE), reconstruction stays within the quantizer's bound, and the
//! bytes stored equal the per-token formula.

use burn_hack_attn::{
    quant::Rounder,
    store::{bytes_per_token, KeyStore, ValueStore},
    Rounding,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn token(rng: &mut StdRng, d: usize) -> Vec<f32> {
    (0..d).map(|_| (rng.random::<f32>() - 0.5) * 6.0).collect()
}

/// Stochastic rounding error bound of the quantizer (see `quant`): scale + fp16 metadata rounding.
fn bound(scale: f32, extent: f32) -> f32 {
    scale + extent / 1024.0
}

#[test]
fn keys_cache_true_sums_and_reconstruct_within_bound() {
    let mut rng = StdRng::seed_from_u64(1);
    for (d, pi, bits) in [(64, 32, 2), (64, 64, 2), (64, 128, 2), (128, 64, 4), (80, 32, 2)] {
        let mut rounder = Rounder::new(Rounding::Stochastic { seed: 3 });
        let mut keys = KeyStore::new(d, bits, pi);
        let tokens: Vec<Vec<f32>> = (0..37).map(|_| token(&mut rng, d)).collect();
        for t in &tokens {
            keys.push(t, &mut rounder).unwrap();
        }
        assert_eq!(keys.len(), 37);
        for (i, original) in tokens.iter().enumerate() {
            let codes = keys.codes(i);
            let back = keys.dequantized(i);
            for (g, group) in codes.chunks(pi).enumerate() {
                assert_eq!(keys.sum(i, g), group.iter().map(|&c| c as u16).sum::<u16>(), "SE, token {i} group {g}");
                let scale = keys.params(i, g).scale.to_f32();
                for z in g * pi..(g * pi + group.len()) {
                    assert!(
                        (original[z] - back[z]).abs() <= bound(scale, 3.0),
                        "d={d} Π={pi}: {} vs {}",
                        original[z],
                        back[z]
                    );
                }
            }
        }
        let sum_width = if pi * ((1 << bits) - 1) <= 255 { 1 } else { 2 };
        let per_token = (d * bits as usize).div_ceil(8) + d.div_ceil(pi) * (4 + sum_width);
        assert_eq!(keys.memory_bytes(), 37 * per_token);
    }
}

#[test]
fn values_keep_an_exact_tail_and_quantize_full_blocks_once() {
    let (d, pi, bits) = (64, 32, 2);
    for n in [1, pi - 1, pi, pi + 1, 3 * pi + 5] {
        let mut rng = StdRng::seed_from_u64(n as u64);
        let mut rounder = Rounder::new(Rounding::Stochastic { seed: 9 });
        let mut values = ValueStore::new(d, bits, pi);
        let tokens: Vec<Vec<f32>> = (0..n).map(|_| token(&mut rng, d)).collect();
        for t in &tokens {
            values.push(t, &mut rounder).unwrap();
        }
        assert_eq!((values.len(), values.blocks(), values.tail_len()), (n, n / pi, n % pi), "n = {n}");
        let tail: Vec<f32> = tokens[values.blocks() * pi..].concat();
        assert_eq!(values.tail(), tail.as_slice(), "the tail is stored exactly");
        for b in 0..values.blocks() {
            let back = values.dequantized_block(b);
            for c in 0..d {
                let codes = values.codes(b, c);
                assert_eq!(values.sum(b, c), codes.iter().map(|&x| x as u16).sum::<u16>(), "SE, block {b} channel {c}");
                let scale = values.params(b, c).scale.to_f32();
                for t in 0..pi {
                    let original = tokens[b * pi + t][c];
                    assert!((original - back[t * d + c]).abs() <= bound(scale, 3.0));
                }
            }
        }
    }
}

#[test]
fn stored_bytes_match_the_per_token_formula() {
    let mut rng = StdRng::seed_from_u64(5);
    for pi in [32, 64, 128] {
        let (d, bits) = (128, 2);
        let mut rounder = Rounder::new(Rounding::Nearest);
        let (mut keys, mut values) = (KeyStore::new(d, bits, pi), ValueStore::new(d, bits, pi));
        let n = 2 * pi;
        for _ in 0..n {
            let t = token(&mut rng, d);
            keys.push(&t, &mut rounder).unwrap();
            values.push(&t, &mut rounder).unwrap();
        }
        assert_eq!(values.tail_len(), 0);
        let measured = (keys.memory_bytes() + values.memory_bytes()) as f64 / n as f64;
        assert_eq!(measured, bytes_per_token(d, bits, pi), "Π = {pi}");
    }
}
