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

#[test]
fn narrow_tensors_keep_their_values_and_refuse_what_they_cannot_hold() {
    use burn::tensor::{Int, TensorData};
    use burn_kvcompress::cache::StateTensor;
    let device = Default::default();
    let ints =
        |values: Vec<i32>| Tensor::<B, 1, Int>::from_data(TensorData::new(values.clone(), [values.len()]), &device);
    let floats = |values: Vec<f32>| Tensor::<B, 1>::from_data(TensorData::new(values.clone(), [values.len()]), &device);

    for (dtype, values) in [(StateDType::U8, vec![0, 7, 255]), (StateDType::U16, vec![0, 256, 65535])] {
        let t = StateTensor::from_int_as("sums", &ints(values.clone()), dtype).unwrap();
        assert_eq!((t.dtype, t.bytes.len()), (dtype, values.len() * dtype.size()));
        assert_eq!(StateDType::from_id(dtype.id()), Some(dtype));
        let back = t.to_int::<B, 1>(&device).unwrap().into_data().convert::<i32>().into_vec::<i32>().unwrap();
        assert_eq!(back, values);
    }
    for (dtype, bad) in [(StateDType::U8, 256), (StateDType::U8, -1), (StateDType::U16, 65536)] {
        let err = StateTensor::from_int_as("sums", &ints(vec![1, bad]), dtype).unwrap_err();
        assert!(matches!(&err, CacheError::State(m) if m.contains(&bad.to_string())), "{err}");
    }
    assert!(matches!(StateTensor::from_int_as("sums", &ints(vec![1]), StateDType::F16), Err(CacheError::State(_))));

    // fp16 numbers held in f32 travel in two bytes each and come back the same.
    let exact = vec![0.0, -2.5, 65504.0, 6.1035156e-5, half::f16::from_f32(0.1).to_f32()];
    let t = StateTensor::from_float_as_f16("min", &floats(exact.clone())).unwrap();
    assert_eq!((t.dtype, t.bytes.len()), (StateDType::F16, 2 * exact.len()));
    let back = t.to_float::<B, 1>(&device).unwrap().into_data().convert::<f32>().into_vec::<f32>().unwrap();
    assert_eq!(back, exact);
    let err = StateTensor::from_float_as_f16("min", &floats(vec![1.0, 0.1])).unwrap_err();
    assert!(matches!(&err, CacheError::State(m) if m.contains("0.1")), "{err}");
}

#[test]
fn tensors_read_their_values_from_any_byte_offset() {
    use burn::tensor::Int;
    use burn_kvcompress::cache::{Bytes, StateTensor};
    let device = Default::default();
    let floats = [1.5f32, -2.0, 3.25, 1e-3];
    let ints = [7i32, -1, 1 << 30, 0];
    // A received buffer holds tensors wherever its serialization puts them: shared where aligned
    // for their values, copied where not.
    for offset in 0..8 {
        let at = |values: &[u8]| {
            let mut buffer = vec![0u8; offset];
            buffer.extend_from_slice(values);
            Bytes::from(buffer).slice(offset..)
        };
        let tensor = |dtype, bytes| StateTensor { name: "t".into(), dtype, shape: vec![2, 2], bytes };
        let f = tensor(StateDType::F32, at(bytemuck::cast_slice(&floats)));
        let back = f.to_float::<B, 2>(&device).unwrap().into_data().convert::<f32>().into_vec::<f32>().unwrap();
        assert_eq!(back, floats, "f32 at offset {offset}");
        let i = tensor(StateDType::I32, at(bytemuck::cast_slice(&ints)));
        let back: Tensor<B, 2, Int> = i.to_int(&device).unwrap();
        assert_eq!(back.into_data().convert::<i32>().into_vec::<i32>().unwrap(), ints, "i32 at offset {offset}");
    }
}
