//! A cache step's keys and values written into the room of their slot buffers in one launch,
//! in place: Burn's `slice_assign` takes a launch per tensor and uploads both tensors' shapes and
//! strides with each (a pool allocation and a copy on CUDA), and a decode step is bound by the
//! host's work per launch. The elements are copied unchanged.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{kernel_float, CubeF32};

/// Units per cube.
const UNITS: u32 = 256;

/// Where the slots of a stream lie in an input: element `(stream, s, c)` at `(stream / heads) ·
/// batch + (stream % heads) · head + s · slot + c`.
#[derive(CubeType, CubeLaunch, Clone, Copy)]
pub struct InputStrides {
    /// Stride of the batch row.
    pub batch: u32,
    /// Stride of the head.
    pub head: u32,
    /// Stride of the slot.
    pub slot: u32,
}

/// Unit `i` copies element `i % n` of the keys (`i < n`) or of the values (the rest), where `n =
/// streams · slots · width`, to element `(stream · capacity + at + s) · pitch + c` of its buffer
/// (`[streams · capacity]` rows of `width` elements starting every `pitch`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn slot_write_kernel<F: Float>(
    k: &Array<F>,
    v: &Array<F>,
    k_buffer: &mut Array<F>,
    v_buffer: &mut Array<F>,
    k_strides: InputStrides,
    v_strides: InputStrides,
    heads: u32,
    streams: u32,
    slots: u32,
    width: u32,
    pitch: u32,
    capacity: u32,
    at: u32,
    #[define(F)] _dtype: StorageType,
) {
    let n = streams * slots * width;
    let i = ABSOLUTE_POS as u32;
    if i >= 2 * n {
        terminate!();
    }
    let e = i % n;
    let c = e % width;
    let s = (e / width) % slots;
    let stream = e / (width * slots);
    let to = ((stream * capacity + at + s) * pitch + c) as usize;
    let (b, h) = (stream / heads, stream % heads);
    if i < n {
        let from = b * k_strides.batch + h * k_strides.head + s * k_strides.slot + c;
        k_buffer[to] = k[from as usize];
    } else {
        let from = b * v_strides.batch + h * v_strides.head + s * v_strides.slot + c;
        v_buffer[to] = v[from as usize];
    }
}

/// The operands of [`write_slots`], or the written buffers.
type Written<T> = Result<[T; 2], ([T; 2], [T; 2])>;

/// Writes `slots` (keys and values `[batch, heads, n, width]`, any strides with the channels
/// adjacent) at slot `at` of `buffers` (`[batch, heads, capacity, width]`, `at + n ≤ capacity`;
/// dense, or with rows padded as CUDA pads narrow ones), in place, and returns the buffers; or
/// returns the operands unchanged where this launch does not apply: buffers shared with another
/// tensor (a clone of the cache, which must not see the write) or laid out otherwise, shapes or
/// float types that differ, channels not adjacent.
// The operands go back by value for Burn's path: a step's hot path, where boxing them would
// allocate for nothing.
#[allow(clippy::result_large_err)]
pub fn write_slots<R: CubeRuntime, BT: BoolElement>(
    buffers: [Tensor<CubeF32<R, BT>, 4>; 2],
    slots: [Tensor<CubeF32<R, BT>, 4>; 2],
    at: usize,
) -> Written<Tensor<CubeF32<R, BT>, 4>> {
    let primitive = |t: Tensor<CubeF32<R, BT>, 4>| t.into_primitive().tensor();
    let tensor = |t| Tensor::<CubeF32<R, BT>, 4>::from_primitive(TensorPrimitive::Float(t));
    match write(buffers.map(primitive), slots.map(primitive), at) {
        Ok(written) => Ok(written.map(tensor)),
        Err((buffers, slots)) => Err((buffers.map(tensor), slots.map(tensor))),
    }
}

/// [`write_slots`] on the primitives.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
#[allow(clippy::result_large_err)] // As for `write_slots`.
fn write<R: CubeRuntime>(buffers: [CubeTensor<R>; 2], slots: [CubeTensor<R>; 2], at: usize) -> Written<CubeTensor<R>> {
    let shape = |t: &CubeTensor<R>| -> [usize; 4] { t.meta.shape().to_vec().try_into().unwrap_or([0; 4]) };
    let [batch, heads, capacity, width] = shape(&buffers[0]);
    let n = shape(&slots[0])[2];
    let pitch = row_pitch(&buffers[0]);
    let applies = buffers.iter().all(|b| {
        b.can_mut() && pitch.is_some() && row_pitch(b) == pitch && shape(b) == [batch, heads, capacity, width]
    }) && slots
        .iter()
        .all(|s| shape(s) == [batch, heads, n, width] && s.meta.strides()[3] == 1 && s.dtype == buffers[0].dtype)
        && buffers[1].dtype == buffers[0].dtype
        && kernel_float(buffers[0].dtype)
        && at + n <= capacity
        && batch * heads * n * width > 0;
    if !applies {
        return Err((buffers, slots));
    }
    let pitch = pitch.expect("checked above");
    let units = 2 * batch * heads * n * width;
    let dtype = buffers[0].dtype;
    let strides = |t: &CubeTensor<R>| {
        let s = t.meta.strides();
        InputStridesLaunch::new(s[0] as u32, s[1] as u32, s[2] as u32)
    };
    let [k, v] = slots;
    let (k_strides, v_strides) = (strides(&k), strides(&v));
    // SAFETY: unit `i < 2 · n` (the guard; `n = batch · heads · slots · width`, the buffers
    // holding `batch · heads · capacity` rows of `pitch ≥ width` elements, checked) writes
    // element `(stream · capacity + at + s) · pitch + c < batch · heads · capacity · pitch` of one
    // buffer (`at + slots ≤ capacity`, checked above), and reads its input at the input's own
    // strides for index `(b, h, s, c)` inside the input's shape (channels adjacent, checked).
    unsafe {
        slot_write_kernel::launch_unchecked(
            &k.client.clone(),
            CubeCount::Static(units.div_ceil(UNITS as usize) as u32, 1, 1),
            CubeDim::new_1d(UNITS),
            k.into_array_arg(),
            v.into_array_arg(),
            buffers[0].clone().into_array_arg(),
            buffers[1].clone().into_array_arg(),
            k_strides,
            v_strides,
            heads as u32,
            (batch * heads) as u32,
            n as u32,
            width as u32,
            pitch as u32,
            capacity as u32,
            at as u32,
            dtype.into(),
        )
    };
    Ok(buffers)
}

/// The row pitch of a `[batch, heads, capacity, width]` buffer whose rows are laid out one after
/// another, each `pitch ≥ width` elements apart (dense, or padded as CUDA pads narrow rows);
/// `None` for any other layout.
fn row_pitch<R: CubeRuntime>(buffer: &CubeTensor<R>) -> Option<usize> {
    let (shape, strides) = (buffer.meta.shape(), buffer.meta.strides());
    let [_, heads, capacity, width] = <[usize; 4]>::try_from(shape.to_vec()).ok()?;
    let pitch = strides[2];
    let rows_follow = strides[3] == 1 && pitch >= width;
    (rows_follow && strides[1] == capacity * pitch && strides[0] == heads * capacity * pitch).then_some(pitch)
}
