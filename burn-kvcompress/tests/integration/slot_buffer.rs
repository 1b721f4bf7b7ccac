//! The slot buffer the dense caches append into: its filled slots are the appended ones in
//! order across growths, its capacity steps by `GROWTH_SLOTS` when an append does not fit, and a
//! clone keeps its slots when the original appends more (on the CPU and, where built, the
//! kernels' GPU backend, whose `slice_assign` writes in place); a cache's keys and values
//! appended as a pair (on the GPU backend in one launch, in place where nothing else holds the
//! buffers) likewise, values given as a strided view, in f32 and f16.

use crate::common::{lcg_uniform, to_vec, Cpu};
use burn::tensor::{backend::Backend, DType, FloatDType, Tensor, TensorData};
use burn_kvcompress::cache::{SlotBuffer, GROWTH_SLOTS};

fn slots<B: Backend>(n: usize, seed: u64, device: &B::Device) -> Tensor<B, 4> {
    let shape = [2, 3, n, 5];
    Tensor::from_data(TensorData::new(lcg_uniform(shape.iter().product(), seed), shape), device)
}

fn appends_in_order_across_growths<B: Backend>(device: &B::Device) {
    // 7 slots, then all but one of the first 256, the last of them, one past them, a long run.
    let runs = [7, GROWTH_SLOTS - 7 - 1, 1, 1, 600];
    let parts: Vec<Tensor<B, 4>> = runs.iter().enumerate().map(|(i, &n)| slots::<B>(n, i as u64, device)).collect();
    let mut buffer = SlotBuffer::new(parts[0].clone());
    let mut copies = vec![(buffer.clone(), 7)];
    let capacities = [256, 256, 256, 512, 1024];
    for (i, part) in parts.iter().enumerate().skip(1) {
        buffer = buffer.appended(part.clone());
        copies.push((buffer.clone(), runs[..=i].iter().sum()));
        assert_eq!(buffer.capacity(), capacities[i], "after {} appends", i + 1);
    }
    // Every clone still holds what it held when it was taken.
    for (copy, len) in copies {
        let upto: Vec<Tensor<B, 4>> = parts
            .iter()
            .scan(0, |n, p| {
                *n += p.dims()[2];
                (*n <= len).then(|| p.clone())
            })
            .collect();
        assert_eq!(copy.len(), len);
        assert_eq!(copy.buffer().dims()[2], copy.capacity());
        assert_eq!(to_vec(copy.filled()), to_vec(Tensor::cat(upto, 2)), "a clone of {len} slots");
    }
}

#[test]
fn slot_buffer_appends_in_order_across_growths_on_the_cpu() {
    appends_in_order_across_growths::<Cpu>(&Default::default());
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn slot_buffer_appends_in_order_across_growths_gpu() {
    appends_in_order_across_growths::<crate::common::Gpu>(&Default::default());
}

fn pairs_append_in_order<B: Backend>(device: &B::Device, dtype: FloatDType) {
    let runs = [7, GROWTH_SLOTS - 7 - 1, 1, 1, 300];
    let keys: Vec<Tensor<B, 4>> =
        runs.iter().enumerate().map(|(i, &n)| slots::<B>(n, 10 + i as u64, device).cast(dtype)).collect();
    // Values as the model hands them: `[batch, n, heads, width]` viewed as `[batch, heads, n, width]`.
    let values: Vec<Tensor<B, 4>> = runs
        .iter()
        .enumerate()
        .map(|(i, &n)| slots::<B>(n, 20 + i as u64, device).reshape([2, n, 3, 5]).swap_dims(1, 2).cast(dtype))
        .collect();
    let mut pair = [SlotBuffer::new(keys[0].clone()), SlotBuffer::new(values[0].clone())];
    let mut snapshot = None;
    for i in 1..runs.len() {
        if i == 3 {
            snapshot = Some(pair.clone());
        }
        pair = SlotBuffer::appended_pair(pair, [keys[i].clone(), values[i].clone()]);
        assert_eq!(pair[0].capacity(), [256, 256, 256, 512, 768][i], "after {} appends", i + 1);
    }
    let host = |t: Tensor<B, 4>| to_vec(t.cast(DType::F32));
    let [k, v] = pair;
    assert_eq!(host(k.filled()), host(Tensor::cat(keys.clone(), 2)), "{dtype:?} keys");
    assert_eq!(host(v.filled()), host(Tensor::cat(values.clone(), 2)), "{dtype:?} values");
    let [k, v] = snapshot.expect("taken at the third append");
    assert_eq!(host(k.filled()), host(Tensor::cat(keys[..3].to_vec(), 2)), "{dtype:?} a clone's keys");
    assert_eq!(host(v.filled()), host(Tensor::cat(values[..3].to_vec(), 2)), "{dtype:?} a clone's values");
}

#[test]
fn slot_pairs_append_in_order_on_the_cpu() {
    pairs_append_in_order::<Cpu>(&Default::default(), FloatDType::F32);
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn slot_pairs_append_in_order_gpu() {
    pairs_append_in_order::<crate::common::Gpu>(&Default::default(), FloatDType::F32);
    pairs_append_in_order::<crate::common::Gpu>(&Default::default(), FloatDType::F16);
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn slot_writes_go_in_place_only_into_unshared_buffers() {
    use burn_kvcompress::kernels::write_slots;
    type G = crate::common::Gpu;
    let device = Default::default();
    let zeros = || Tensor::<G, 4>::zeros([2, 3, 8, 5], (&device, DType::F16));
    let k = slots::<G>(2, 31, &device).cast(FloatDType::F16);
    let v = slots::<G>(2, 32, &device).reshape([2, 2, 3, 5]).swap_dims(1, 2).cast(FloatDType::F16);
    let written = match write_slots([zeros(), zeros()], [k.clone(), v.clone()], 3) {
        Ok(written) => written,
        Err(_) => panic!("dense buffers that nothing else holds are written in place"),
    };
    let host = |t: Tensor<G, 4>| to_vec(t.cast(DType::F32));
    for (buffer, slots) in written.iter().zip([&k, &v]) {
        let expected = Tensor::cat(vec![zeros().narrow(2, 0, 3), slots.clone(), zeros().narrow(2, 0, 3)], 2);
        assert_eq!(host(buffer.clone()), host(expected));
    }
    let shared = written[0].clone();
    assert!(write_slots(written, [k, v], 5).is_err(), "a buffer another tensor holds is not written");
    drop(shared);
}
