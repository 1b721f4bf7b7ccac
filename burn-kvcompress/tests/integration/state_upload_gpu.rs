//! Received state tensors uploaded on wgpu (lavapipe in CI) or CUDA: every dtype at every byte
//! offset and awkward shapes arrive with their exact values, one by one or a layer at once
//! (`LayerState::upload`), and the backend's next kernel reads them. On CUDA the bytes go straight
//! into the tensors' buffers (`cuda_write`, `cuda_write_all`), which refuse what they cannot write
//! in place.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use burn::tensor::{DType, FloatDType, Int, Tensor};
use burn_kvcompress::{
    cache::{Bytes, LayerState, StateDType, StateTensor},
    error::CacheError,
};

#[cfg(feature = "cuda")]
type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
type Gpu = burn::backend::Wgpu<f32, i32>;

/// `values` in a buffer starting `offset` bytes into a larger allocation.
fn at_offset(values: &[u8], offset: usize) -> Bytes {
    let mut buffer = vec![0xAB; offset];
    buffer.extend_from_slice(values);
    Bytes::from(buffer).slice(offset..)
}

/// A tensor's values on the host (read from its bytes wherever the backend's read left them).
fn host<T: bytemuck::Pod, const D: usize, K: burn::tensor::BasicOps<Gpu>>(tensor: Tensor<Gpu, D, K>) -> Vec<T> {
    bytemuck::pod_collect_to_vec(tensor.into_data().as_bytes())
}

fn state(dtype: StateDType, shape: &[usize], bytes: Bytes) -> StateTensor {
    named("t", dtype, shape, bytes)
}

fn named(name: &str, dtype: StateDType, shape: &[usize], bytes: Bytes) -> StateTensor {
    StateTensor { name: name.into(), dtype, shape: shape.to_vec(), bytes }
}

#[test]
fn state_tensors_arrive_exact_from_any_offset_and_feed_the_next_kernel() {
    let device = Default::default();
    for shape in [[1, 1, 1], [3, 5, 7], [2, 1, 129], [0, 4, 2]] {
        let n: usize = shape.iter().product();
        let floats: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 11.0).collect();
        let halves: Vec<half::f16> = floats.iter().map(|&x| half::f16::from_f32(x)).collect();
        let ints: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(2_654_435_761u32 as i32)).collect();
        for offset in [0, 1, 2, 3, 4, 16] {
            // The next kernel reads what was written (no kernel for an empty tensor: CUDA
            // refuses a launch of no blocks).
            let next = |t: Tensor<Gpu, 3>| if n > 0 { t * 2.0 } else { t };
            let f = state(StateDType::F32, &shape, at_offset(bytemuck::cast_slice(&floats), offset));
            let t: Tensor<Gpu, 3> = f.to_float(&device).unwrap();
            let doubled: Vec<f32> = host(next(t));
            let expected: Vec<f32> = floats.iter().map(|x| if n > 0 { x * 2.0 } else { *x }).collect();
            assert_eq!(doubled, expected, "f32 {shape:?} at offset {offset}");

            let h = state(StateDType::F16, &shape, at_offset(bytemuck::cast_slice(&halves), offset));
            let t: Tensor<Gpu, 3> = h.to_float_as(&device, FloatDType::F16).unwrap();
            assert_eq!(t.dtype(), DType::F16);
            let back: Vec<half::f16> = host(t);
            assert_eq!(back, halves, "f16 {shape:?} at offset {offset}");

            let i = state(StateDType::I32, &shape, at_offset(bytemuck::cast_slice(&ints), offset));
            let t: Tensor<Gpu, 3, Int> = i.to_int(&device).unwrap();
            let back: Vec<i32> = host(if n > 0 { t + 1 } else { t });
            let expected: Vec<i32> = ints.iter().map(|x| if n > 0 { x.wrapping_add(1) } else { *x }).collect();
            assert_eq!(back, expected, "i32 {shape:?} at offset {offset}");
        }
    }
}

/// A layer of every dtype, each tensor at its own byte offset (one of them empty, one whose bytes
/// do not match its shape), uploaded at once: each reads back its exact values at the rank and
/// type asked for, feeds the next kernel, and the malformed, missing or misranked reads are
/// typed errors.
#[test]
fn a_layer_uploaded_at_once_reads_back_each_tensor_exact() {
    let device = Default::default();
    let shape = [2, 3, 67];
    let n: usize = shape.iter().product();
    let floats: Vec<f32> = (0..n).map(|i| i as f32 * 0.61 - 40.0).collect();
    let halves: Vec<half::f16> = floats.iter().map(|&x| half::f16::from_f32(x)).collect();
    let ints: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(-1_640_531_535)).collect();
    let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
    let shorts: Vec<u16> = (0..n).map(|i| (i * 4099 % 65536) as u16).collect();
    let layer = LayerState {
        tokens: 3,
        tensors: vec![
            named("f32", StateDType::F32, &shape, at_offset(bytemuck::cast_slice(&floats), 4)),
            named("f16", StateDType::F16, &shape, at_offset(bytemuck::cast_slice(&halves), 2)),
            named("i32", StateDType::I32, &shape, at_offset(bytemuck::cast_slice(&ints), 16)),
            named("u8", StateDType::U8, &shape, at_offset(&bytes, 3)),
            named("u16", StateDType::U16, &shape, at_offset(bytemuck::cast_slice(&shorts), 1)),
            named("empty", StateDType::I32, &[2, 0, 5], Bytes::new()),
            named("short", StateDType::F32, &shape, at_offset(&bytemuck::cast_slice(&floats)[4..], 0)),
        ],
    };
    let uploaded = layer.upload::<Gpu>(&device);

    let doubled: Vec<f32> = host(uploaded.to_float::<3>("f32").unwrap() * 2.0);
    assert_eq!(doubled, floats.iter().map(|x| x * 2.0).collect::<Vec<_>>());
    let f16s = uploaded.to_float_as::<3>("f16", FloatDType::F16).unwrap();
    assert_eq!(f16s.dtype(), DType::F16);
    assert_eq!(host::<half::f16, 3, _>(f16s), halves);
    let widened: Vec<f32> = host(uploaded.to_float::<3>("f16").unwrap());
    assert_eq!(widened, halves.iter().map(|h| h.to_f32()).collect::<Vec<_>>());
    let narrowed: Vec<half::f16> = host(uploaded.to_float_as::<3>("f32", FloatDType::F16).unwrap());
    assert_eq!(narrowed, halves);
    let plus_one: Vec<i32> = host(uploaded.to_int::<3>("i32").unwrap() + 1);
    assert_eq!(plus_one, ints.iter().map(|x| x.wrapping_add(1)).collect::<Vec<_>>());
    let u8s: Vec<i32> = host(uploaded.to_int::<3>("u8").unwrap());
    assert_eq!(u8s, bytes.iter().map(|&b| i32::from(b)).collect::<Vec<_>>());
    let u16s: Vec<i32> = host(uploaded.to_int::<3>("u16").unwrap());
    assert_eq!(u16s, shorts.iter().map(|&s| i32::from(s)).collect::<Vec<_>>());
    assert_eq!(uploaded.to_int::<3>("empty").unwrap().dims(), [2, 0, 5]);

    let state_error = |r: Result<(), CacheError>, what: &str| {
        assert!(matches!(&r, Err(CacheError::State(m)) if m.contains(what)), "{what}: {r:?}")
    };
    state_error(uploaded.to_float::<3>("short").map(|_| ()), "bytes for shape");
    state_error(uploaded.to_float::<3>("absent").map(|_| ()), "missing tensor `absent`");
    state_error(uploaded.to_float::<2>("f32").map(|_| ()), "rank 3");
    state_error(uploaded.to_int::<1>("i32").map(|_| ()), "rank 3");
    state_error(uploaded.to_int::<3>("f32").map(|_| ()), "expected");
    state_error(uploaded.to_float::<3>("i32").map(|_| ()), "expected");
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_write_fills_contiguous_buffers_of_its_size_and_refuses_the_rest() {
    use burn_kvcompress::kernels::{cuda_write, cuda_write_all, WriteRefused};
    let device = Default::default();
    // Rows of 64 f32 (256 bytes): a layout CubeCL does not pitch.
    let values: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&values);
    let empty = Tensor::<Gpu, 2>::empty([4, 64], &device);
    assert_eq!(cuda_write(&empty.clone().into_primitive().tensor(), bytes), Ok(()));
    let read = |t: &Tensor<Gpu, 2>| t.clone().into_data().convert::<f32>().into_vec::<f32>().unwrap();
    assert_eq!(read(&empty), values);
    let refused = |r: Result<(), WriteRefused>| matches!(r, Err(WriteRefused::Layout { .. }));
    assert!(refused(cuda_write(&empty.clone().into_primitive().tensor(), &bytes[4..])), "a size that differs");
    let transposed = empty.clone().swap_dims(0, 1);
    assert!(refused(cuda_write(&transposed.into_primitive().tensor(), bytes)), "a layout not contiguous");
    assert_eq!(cuda_write(&values, bytes), Err(WriteRefused::NotCuda));
    assert_eq!(read(&empty), values, "refusals write nothing");

    // A batch is checked whole before anything is written.
    let other = Tensor::<Gpu, 2>::empty([4, 64], &device);
    let zeros = vec![0u8; bytes.len()];
    let batch =
        [(empty.clone().into_primitive().tensor(), &zeros[..]), (other.clone().into_primitive().tensor(), &zeros[4..])];
    let writes: Vec<(&dyn std::any::Any, &[u8])> = batch.iter().map(|(t, b)| (t as &dyn std::any::Any, *b)).collect();
    assert!(refused(cuda_write_all(&writes)), "one tensor of the batch of another size");
    assert_eq!(read(&empty), values, "a refused batch writes nothing");
    let writes = [(&batch[0].0 as &dyn std::any::Any, bytes), (&batch[1].0 as &dyn std::any::Any, bytes)];
    assert_eq!(cuda_write_all(&writes), Ok(()));
    assert_eq!((read(&empty), read(&other)), (values.clone(), values));
}

/// Received bytes in the device's page-locked memory (CUDA's pinned memory; none on wgpu) upload
/// exactly, at every offset, and the buffers go back to the driver when dropped.
#[test]
fn state_tensors_in_the_devices_page_locked_memory_arrive_exact() {
    use burn_kvcompress::cache::{device_host_allocator, HostBuffer};

    let device = Default::default();
    let allocator = device_host_allocator::<Gpu>(&device);
    assert_eq!(allocator.is_some(), cfg!(feature = "cuda"), "page-locked memory exactly on CUDA");
    let shape = [3, 5, 129];
    let ints: Vec<i32> = (0..shape.iter().product::<usize>() as i32).map(|i| i * 7 - 1000).collect();
    let values: &[u8] = bytemuck::cast_slice(&ints);
    for round in 0..3 {
        for offset in [0, 4, 16] {
            let mut buffer = HostBuffer::zeroed(offset + values.len(), allocator.as_ref());
            assert_eq!(buffer.is_allocated(), allocator.is_some());
            buffer[offset..].copy_from_slice(values);
            let bytes = Bytes::from_owner(buffer).slice(offset..);
            let t: Tensor<Gpu, 3, Int> = state(StateDType::I32, &shape, bytes).to_int(&device).unwrap();
            let back: Vec<i32> = host(t + 1);
            let expected: Vec<i32> = ints.iter().map(|x| x + 1).collect();
            assert_eq!(back, expected, "round {round}, offset {offset}");
        }
    }
}
