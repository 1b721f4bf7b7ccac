//! The key rotations a [`HackScheme`](super::HackScheme) hands its caches, built and uploaded
//! once per layer and device.
//!
//! Every request's caches need the same matrices: building a layer's Hadamard rotations on the
//! host and uploading them (`[kv_heads, head_dim, head_dim]` f32, 512 KB a layer of an 8B model)
//! was paid again by every request that joined a decode batch or started a prefill. The scheme
//! keeps the device tensors instead; caches share them read-only (a tensor held here is never the
//! only reference, so no backend operation writes into it in place).

use std::{
    any::Any,
    sync::{Mutex, PoisonError},
};

use burn::tensor::{backend::Backend, Tensor};

/// A layer's key rotation on one device (None without rotation), or why it cannot be built.
pub type DeviceRotation<B> = Result<Option<Tensor<B, 3>>, String>;

/// Device rotations by (backend, device, layer, shape); the scheme is not generic over the
/// backend, so entries are stored type-erased and found by downcasting.
#[derive(Default)]
pub struct RotationMemo {
    entries: Mutex<Vec<Box<dyn Any + Send + Sync>>>,
}

/// One memoized rotation and what it was built for.
struct Entry<B: Backend> {
    device: B::Device,
    layer: usize,
    kv_heads: usize,
    head_dim: usize,
    rotation: DeviceRotation<B>,
}

impl RotationMemo {
    /// Layer `layer`'s rotation for `kv_heads` heads of `head_dim` channels on `device`: the one
    /// built before, or `build`'s, kept for the next call.
    pub fn get_or_build<B: Backend>(
        &self,
        layer: usize,
        kv_heads: usize,
        head_dim: usize,
        device: &B::Device,
        build: impl FnOnce() -> DeviceRotation<B>,
    ) -> DeviceRotation<B> {
        // A panic while building leaves no entry behind, so a poisoned list is still consistent.
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let found = entries
            .iter()
            .filter_map(|e| e.downcast_ref::<Entry<B>>())
            .find(|e| (e.layer, e.kv_heads, e.head_dim) == (layer, kv_heads, head_dim) && e.device == *device);
        if let Some(entry) = found {
            return entry.rotation.clone();
        }
        let rotation = build();
        entries.push(Box::new(Entry::<B> {
            device: device.clone(),
            layer,
            kv_heads,
            head_dim,
            rotation: rotation.clone(),
        }));
        rotation
    }
}

impl std::fmt::Debug for RotationMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.entries.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("RotationMemo").field("rotations", &held).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use burn::backend::{ndarray::NdArrayDevice, Autodiff, NdArray};

    use super::*;

    #[test]
    fn each_layer_shape_and_backend_is_built_once() {
        let (memo, builds) = (RotationMemo::default(), Cell::new(0));
        let device = NdArrayDevice::Cpu;
        let get = |layer, kv_heads, head_dim| {
            memo.get_or_build::<NdArray>(layer, kv_heads, head_dim, &device, || {
                builds.set(builds.get() + 1);
                Ok(Some(Tensor::full([kv_heads, head_dim, head_dim], layer as f32, &device)))
            })
        };
        let first = get(1, 2, 4).unwrap().unwrap();
        assert_eq!(builds.get(), 1);
        let again = get(1, 2, 4).unwrap().unwrap();
        assert_eq!(builds.get(), 1, "the same layer and shape again: memoized");
        again.into_data().assert_eq(&first.into_data(), true);
        get(0, 2, 4).unwrap();
        get(1, 1, 4).unwrap();
        get(1, 2, 8).unwrap();
        assert_eq!(builds.get(), 4, "another layer or shape is built");
        memo.get_or_build::<Autodiff<NdArray>>(1, 2, 4, &device, || {
            builds.set(builds.get() + 1);
            Err("none".into())
        })
        .unwrap_err();
        let error = memo.get_or_build::<Autodiff<NdArray>>(1, 2, 4, &device, || unreachable!("memoized"));
        assert_eq!(error.unwrap_err(), "none", "errors are memoized too");
        assert_eq!((builds.get(), format!("{memo:?}")), (5, "RotationMemo { rotations: 5 }".into()));
    }
}
