//! A ragged batch (continuous batching) refuses bad joins, leaves and appends with typed errors.
//! That its sequences decode exactly as each does alone, with every scheme, is tested in
//! `burn-kvschemes/tests/integration/ragged_batch.rs`.

use crate::common::*;
use burn::tensor::Tensor;
use burn_kvcompress::{
    cache::{DenseScheme, KvCache, LayerCaches, RaggedBatch},
    error::CacheError,
    loading::load_hf_model,
    model::Logits,
};

#[test]
fn bad_joins_leaves_and_appends_are_refused() {
    let device = Default::default();
    let model = load_hf_model::<Cpu>(&hf_tiny_dir("tiny-llama"), &device).expect("load").model;
    let layers = model.config().num_layers;
    let mut batch = RaggedBatch::new(layers);
    let two_rows: LayerCaches<_> = model.new_cache(&DenseScheme, 2, &device);
    assert!(matches!(batch.join(two_rows), Err(CacheError::Request(_))), "a batch of two joins as one row");
    let mut fewer = model.new_cache(&DenseScheme, 1, &device);
    fewer.layers.pop();
    assert!(matches!(batch.join(fewer), Err(CacheError::Request(_))), "another model's layers");
    assert!(matches!(batch.leave(0), Err(CacheError::Request(_))), "a row of an empty batch");
    assert!(batch.is_empty());

    let mut one = model.new_cache(&DenseScheme, 1, &device);
    model.forward(&[vec![1, 2, 3]], &mut one, Logits::Last).unwrap();
    batch.join(one).unwrap();
    // Keys and values of two rows for a batch of one.
    let layer = &mut batch.caches().layers[0];
    let kv = |rows| Tensor::<Cpu, 4>::zeros([rows, 1, 1, 4], &device);
    assert!(matches!(layer.append(kv(2), kv(2)), Err(CacheError::Shape { .. })));
    let left = batch.leave(0).unwrap();
    assert_eq!(left.key_start, [0]);
    assert_eq!(left.len::<Cpu>(), 3, "the sequence leaves with its slots");
}
