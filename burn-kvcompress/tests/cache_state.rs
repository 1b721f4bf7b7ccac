//! The compressed-state container: a dense cache exported and re-imported attends exactly as the
//! original, and states that do not fit are rejected with a typed error.

use burn::tensor::{Distribution, Tensor};
use burn_kvcompress::{
    backend::NdArray,
    cache::{
        AttendOptions, CacheGeometry, DenseScheme, KvCache, KvScheme, StateDType, TransferableCache, TransferableScheme,
    },
    error::CacheError,
};

type B = NdArray;

const GEOMETRY: CacheGeometry = CacheGeometry { batch: 2, kv_heads: 3, heads: 9, head_dim: 8 };

fn random(shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), &Default::default())
}

#[test]
fn dense_state_round_trips() {
    let device = Default::default();
    let mut cache = KvScheme::<B>::new_cache(&DenseScheme, 0, GEOMETRY, &device);
    cache.append(random([2, 3, 5, 8]), random([2, 3, 5, 8])).unwrap();
    let state = cache.export_state();
    assert_eq!(state.tokens, 5);
    assert_eq!(state.byte_len(), 2 * 2 * 3 * 5 * 8 * 4);
    assert!(state.tensors.iter().all(|t| t.dtype == StateDType::F32 && t.validate().is_ok()));

    let copy = DenseScheme.import_state(0, GEOMETRY, &state, &device).unwrap();
    assert_eq!(copy.export_state(), state);
    let q = random([2, 9, 1, 8]);
    let options = AttendOptions { scale: 0.35, key_start: vec![0, 0], window: None };
    let a = cache.attend(q.clone(), &options).unwrap().into_data();
    let b = copy.attend(q, &options).unwrap().into_data();
    assert_eq!(a, b);
}

#[test]
fn malformed_states_are_rejected() {
    let device = Default::default();
    let mut cache = KvScheme::<B>::new_cache(&DenseScheme, 0, GEOMETRY, &device);
    cache.append(random([2, 3, 4, 8]), random([2, 3, 4, 8])).unwrap();
    let state = cache.export_state();
    let import = |s| TransferableScheme::<B>::import_state(&DenseScheme, 0, GEOMETRY, s, &device).map(|_| ());

    let mut truncated = state.clone();
    let bytes = &mut truncated.tensors[1].bytes;
    bytes.truncate(bytes.len() - 1);
    assert!(matches!(import(&truncated), Err(CacheError::State(_))));

    let mut missing = state.clone();
    missing.tensors.remove(0);
    assert!(matches!(import(&missing), Err(CacheError::State(m)) if m.contains("`k`")));

    let mut wrong_heads = state.clone();
    for t in &mut wrong_heads.tensors {
        t.shape = vec![2, 4, 3, 8];
    }
    assert!(matches!(import(&wrong_heads), Err(CacheError::State(_))));

    let mut wrong_tokens = state;
    wrong_tokens.tokens = 7;
    assert!(matches!(import(&wrong_tokens), Err(CacheError::State(_))));
}
