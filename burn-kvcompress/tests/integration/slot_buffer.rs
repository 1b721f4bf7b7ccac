//! The slot buffer the dense caches append into: its filled slots are the appended ones in
//! order across growths, its capacity steps by `GROWTH_SLOTS` when an append does not fit, and a
//! clone keeps its slots when the original appends more (on the CPU and, where built, the
//! kernels' GPU backend, whose `slice_assign` writes in place).

use crate::common::{lcg_uniform, to_vec, Cpu};
use burn::tensor::{backend::Backend, Tensor, TensorData};
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
