//! Received state tensors uploaded on wgpu (lavapipe in CI) or CUDA: every dtype at every byte
//! offset and awkward shapes arrive with their exact values, and the backend's next kernel reads
//! them. On CUDA the bytes go straight into the tensor's buffer (`cuda_write`), which refuses
//! what it cannot write in place.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use burn::tensor::{DType, FloatDType, Int, Tensor};
use burn_kvcompress::cache::{Bytes, StateDType, StateTensor};

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
    StateTensor { name: "t".into(), dtype, shape: shape.to_vec(), bytes }
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

#[cfg(feature = "cuda")]
#[test]
fn cuda_write_fills_contiguous_buffers_of_its_size_and_refuses_the_rest() {
    use burn_kvcompress::kernels::{cuda_write, WriteRefused};
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
