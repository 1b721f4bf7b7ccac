//! Kernel arguments from tensors on wgpu (lavapipe in CI) or CUDA: a tensor whose rows are only
//! spaced out (a pitch) is passed as it is, with its pitch; any other layout is copied. Outputs
//! carved out of one allocation do not overlap; the rows' first slots are uploaded once while
//! they stay the same.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use burn::tensor::{Tensor, TensorData};
use burn_cubecl::tensor::CubeTensor;
use burn_kvcompress::kernels::{dense_outputs, key_start_arg, pitched_rows_arg};
use cubecl::{prelude::*, zspace::metadata::Metadata};

#[cfg(feature = "cuda")]
type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
type Gpu = burn::backend::Wgpu<f32, i32>;

/// `[2, 3, 5, 4]` holding 0, 1, 2, … in row-major order.
fn counting() -> Tensor<Gpu, 4> {
    let values: Vec<f32> = (0..120).map(|x| x as f32).collect();
    Tensor::from_data(TensorData::new(values, [2, 3, 5, 4]), &Default::default())
}

/// The f32 values of the buffer a kernel would be handed.
fn buffer<R: burn_cubecl::CubeRuntime>(tensor: &CubeTensor<R>) -> Vec<f32> {
    let bytes = tensor.client.read_one(tensor.handle.clone()).expect("read");
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn padded_rows_are_passed_in_place_with_their_pitch() {
    // The first 2 columns of each row of 4, as CUDA's optimized allocation lays out rows of 2
    // f32: rows of 2 values, every 4 elements.
    let dense = counting().into_primitive().tensor();
    let metadata = Metadata::new([2, 3, 5, 2], [60, 20, 4, 1]);
    let padded =
        CubeTensor::new(dense.client.clone(), dense.handle.clone(), metadata, dense.device.clone(), dense.dtype);
    let (arg, pitch) = pitched_rows_arg(padded);
    assert_eq!(pitch, 4);
    let values = buffer(&arg);
    for row in 0..30 {
        for c in 0..2 {
            assert_eq!(values[row * pitch + c], (row * 4 + c) as f32, "row {row}, column {c}");
        }
    }
}

#[test]
fn other_layouts_are_copied_densely() {
    // Transposed rows: the last dimension is not unit-stride.
    let transposed = counting().swap_dims(2, 3).into_primitive().tensor();
    let (arg, pitch) = pitched_rows_arg(transposed);
    assert_eq!(pitch, 5);
    let values = buffer(&arg);
    for row in 0..24 {
        let (matrix, column) = (row / 4, row % 4);
        for c in 0..5 {
            assert_eq!(values[row * pitch + c], (matrix * 20 + c * 4 + column) as f32, "row {row}, column {c}");
        }
    }
}

#[cube(launch)]
fn fill_kernel(out: &mut Array<f32>, value: f32) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = value + ABSOLUTE_POS as f32;
    }
}

#[test]
fn outputs_carved_from_one_buffer_are_disjoint() {
    let like = counting().into_primitive().tensor();
    // Lengths that do and do not fill the device's alignment.
    let lens = [1, 37, 130, 128];
    let parts = dense_outputs::<_, f32, 4>(&like, lens);
    for (i, part) in parts.iter().enumerate() {
        assert_eq!(part.meta.shape().as_slice(), [lens[i]]);
        fill_kernel::launch::<_>(
            &part.client,
            CubeCount::Static((lens[i] as u32).div_ceil(64), 1, 1),
            CubeDim::new_1d(64),
            part.clone().into_array_arg(),
            1000.0 * i as f32,
        );
    }
    // Read after every part is written: overlapping parts would show another part's values.
    for (i, part) in parts.iter().enumerate() {
        let values = buffer(part);
        assert!(values.len() >= lens[i]);
        for (j, v) in values[..lens[i]].iter().enumerate() {
            assert_eq!(*v, 1000.0 * i as f32 + j as f32, "part {i}, element {j}");
        }
    }
}

#[test]
fn key_start_is_uploaded_again_only_when_it_changes() {
    let like = counting().into_primitive().tensor();
    let read = |t: &CubeTensor<_>| -> Vec<i32> {
        let bytes = t.client.read_one(t.handle.clone()).expect("read");
        bytes.chunks_exact(4).take(t.meta.shape()[0]).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    };
    let id = |t: &CubeTensor<_>| format!("{:?}", t.handle.memory);
    let first = key_start_arg::<_, u32>(&[0, 0, 3], &like);
    let same = key_start_arg::<_, u32>(&[0, 0, 3], &like);
    let other = key_start_arg::<_, u32>(&[0, 5, 3], &like);
    let back = key_start_arg::<_, u32>(&[0, 0, 3], &like);
    assert_eq!(id(&first), id(&same), "the same values reuse the upload");
    assert_ne!(id(&first), id(&other), "other values are uploaded");
    assert_eq!(read(&first), [0, 0, 3]);
    assert_eq!(read(&other), [0, 5, 3]);
    assert_eq!(read(&back), [0, 0, 3]);
    assert_eq!(read(&key_start_arg::<_, u32>(&[7], &like)), [7], "another batch size");
}
