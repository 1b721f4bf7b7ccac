//! Each batch row's first real slot (`AttendOptions::key_start`) as a kernel argument, uploaded
//! once while it stays the same.
//!
//! Every attention kernel takes the rows' first slots as a `u32` array. A decode step passes the
//! same values to every layer and usually to the next step too, and an upload costs a pool
//! reservation and a copy on CubeCL's device thread, the thread that bounds a decode step (see
//! `docs/design.md`). So the last upload is kept per thread and runtime and handed out again
//! while the values and the device match. Kernels only read it, and the kept clone makes its
//! buffer shared, so no Burn operation writes it in place.

use std::{any::Any, cell::RefCell};

use burn::tensor::{Int, Tensor, TensorData};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};

use super::{int_arg, CubeF32};

/// The last upload of one runtime.
struct Uploaded<R: CubeRuntime> {
    starts: Vec<i32>,
    tensor: CubeTensor<R>,
}

thread_local! {
    /// The last upload per runtime (one entry each; found by type).
    static UPLOADED: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// `key_start` (one entry per batch row) as a dense `[batch]` array of `i32` (read by kernels as
/// `u32`) on `like`'s device: the previous call's buffer where the values and the device are the
/// same, else a new upload that replaces it.
pub fn key_start_arg<R: CubeRuntime, BT: BoolElement>(key_start: &[usize], like: &CubeTensor<R>) -> CubeTensor<R> {
    let starts: Vec<i32> = key_start.iter().map(|&s| s as i32).collect();
    UPLOADED.with_borrow_mut(|uploaded| {
        let slot = uploaded.iter_mut().find_map(|u| u.downcast_mut::<Uploaded<R>>());
        if let Some(last) = slot.as_ref().filter(|u| u.starts == starts && u.tensor.device == like.device) {
            return last.tensor.clone();
        }
        let n = starts.len();
        let data = TensorData::new(starts.clone(), [n]);
        let tensor = int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::from_data(data, &like.device));
        let fresh = Uploaded { starts, tensor: tensor.clone() };
        match slot {
            Some(last) => *last = fresh,
            None => uploaded.push(Box::new(fresh)),
        }
        tensor
    })
}
