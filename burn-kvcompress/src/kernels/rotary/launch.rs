//! Launching the rotary kernel: a layer's queries and keys in one launch (RoPE, and the cache's
//! rotation where it has one), or rows already in heads multiplied by a rotation alone.

use burn::tensor::{DType, Int, Tensor, TensorPrimitive};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use cubecl::{ir::HardwareProperties, prelude::*};

use super::kernel::{rotary_kernel, RotaryGeometry, RowLayoutLaunch, LOADS, TILE_ROWS};
use crate::kernels::{dense_output, dense_output_of, float_arg, int_arg, kernel_float, CubeF32};

/// The most units of a cube that multiplies by a rotation.
const MAX_UNITS: u32 = 256;

/// The kernel's shape for heads of `head_dim` channels; `None` where it does not apply: an odd
/// head dimension, or with `rotate` one that is not a power of two from 16 to 256 (the
/// product's parts are powers of two, each a multiple of [`LOADS`] channels).
fn geometry(head_dim: usize, rope: bool, rotate: bool) -> Option<RotaryGeometry> {
    let d = u32::try_from(head_dim).ok()?;
    if d == 0 || !d.is_multiple_of(2) {
        return None;
    }
    let parts = match rotate {
        true if !d.is_power_of_two() || !(16..=MAX_UNITS).contains(&d) => return None,
        true => (MAX_UNITS / d).min(d / LOADS).max(1),
        false => (MAX_UNITS / d).max(1),
    };
    Some(RotaryGeometry { head_dim: d, parts, rope, rotate })
}

/// The most units of such a cube where the launch has fewer cubes than the device has SMs.
const FEW_CUBES_MAX_UNITS: u32 = 1024;

/// `geo` with each product's channels split into more parts where the launch's `cubes` leave SMs
/// idle (a decode step's few rows): a unit then issues its loads of `R` in fewer rounds, each of
/// which waits a memory latency, and such a launch's time is those rounds (8.8 µs for 4 query rows
/// × 8 KV heads of 128 channels in 2 parts on an H200, `results/hack-decode-channel-h200.md`).
/// Parts stay powers of two of at least [`LOADS`] channels, within the device's units per cube and
/// shared memory (the tile and a partial sum per part).
fn spread_for_few_cubes(geo: RotaryGeometry, cubes: usize, hardware: &HardwareProperties) -> RotaryGeometry {
    let sms = hardware.num_streaming_multiprocessors.unwrap_or(0) as usize;
    if !geo.rotate || cubes >= sms {
        return geo;
    }
    let fits = |parts: u32| {
        let shared_bytes = (TILE_ROWS * geo.head_dim * (parts + 1) * 4) as usize;
        parts * geo.head_dim <= FEW_CUBES_MAX_UNITS.min(hardware.max_units_per_cube)
            && shared_bytes <= hardware.max_shared_memory_size
    };
    let mut parts = geo.parts;
    while 2 * parts * LOADS <= geo.head_dim && fits(2 * parts) {
        parts *= 2;
    }
    RotaryGeometry { parts, ..geo }
}

/// Whether [`rotary_qk`] (with a rotation or not) and [`rotate_heads_kernel`] (always with one)
/// take operands of `x_dtype` with heads of `head_dim` channels, writing `dtype`.
pub fn rotary_applies(x_dtype: DType, dtype: DType, head_dim: usize, rotate: bool) -> bool {
    kernel_float(x_dtype) && kernel_float(dtype) && geometry(head_dim, true, rotate).is_some()
}

/// RoPE's operands: the tables `[max_position, head_dim / 2]` and the rows' positions.
struct Rope<R: CubeRuntime> {
    cos: CubeTensor<R>,
    sin: CubeTensor<R>,
    positions: CubeTensor<R>,
    max_position: usize,
}

/// One launch's operands: the inputs (queries, keys), their layout, RoPE's and the rotation's
/// operands where the launch applies them.
struct Operands<R: CubeRuntime> {
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    rope: Option<Rope<R>>,
    rotation: Option<CubeTensor<R>>,
    /// `[seq, k_seq, group, kv_heads, batch]`.
    shape: [usize; 5],
    /// The queries' and the keys' strides of batch row, head and position.
    strides: [[usize; 3]; 2],
    head_dim: usize,
    dtypes: [DType; 2],
}

/// Runs the kernel; returns the queries `[batch, kv_heads · group, seq, head_dim]` and keys
/// `[batch, kv_heads, k_seq, head_dim]` (flat), in `dtypes`.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
fn launch<R: CubeRuntime>(ops: Operands<R>) -> [CubeTensor<R>; 2] {
    let [seq, k_seq, group, kv_heads, batch] = ops.shape;
    let d = ops.head_dim;
    let rows = group * seq + k_seq;
    let streams = batch * kv_heads;
    let geo = geometry(d, ops.rope.is_some(), ops.rotation.is_some()).expect("callers check rotary_applies");
    let cubes = rows.div_ceil(TILE_ROWS as usize) * streams;
    let geo = spread_for_few_cubes(geo, cubes, &ops.q.client.properties().hardware);
    let x_dtype = ops.q.dtype;
    let q_out = dense_output_of(&ops.q, batch * kv_heads * group * seq * d, ops.dtypes[0]);
    let k_out = dense_output_of(&ops.q, (batch * kv_heads * k_seq * d).max(1), ops.dtypes[1]);
    // Placeholders the kernel never reads where RoPE is not applied.
    let Rope { cos, sin, positions, max_position } = ops.rope.unwrap_or_else(|| Rope {
        cos: dense_output::<R, f32>(&ops.q, 1),
        sin: dense_output::<R, f32>(&ops.q, 1),
        positions: dense_output::<R, i32>(&ops.q, 1),
        max_position: 1,
    });
    // Without a rotation the kernel never reads `r`: the tables stand in (no allocation).
    let r = ops.rotation.unwrap_or_else(|| cos.clone());
    if rows * streams * d > 0 {
        let [[q_batch, q_head, q_position], [k_batch, k_head, k_position]] = ops.strides.map(|s| s.map(|v| v as u32));
        // SAFETY: cube (tile, stream) handles rows `tile · TILE_ROWS + t < rows` (the loops stop
        // at `tile_rows`) of stream `stream < batch · kv_heads`; a query row (head `kv_head ·
        // group + g < heads`, position `s < seq`) reads channels `< head_dim` at the queries'
        // strides, within `q` by the caller's shapes, and writes row `(batch · heads + head) ·
        // seq + s` of `q_out` (`batch · heads · seq` rows); a key row likewise within `k` and
        // `k_out` (`batch · kv_heads · k_seq` rows); the RoPE partner channel is `c ± half`
        // within the row; positions entry `batch · seq + s < batch · seq` (their length, checked
        // by the callers), clamped below `max_position` for the tables (`max_position · half`);
        // matrix `kv_head < kv_heads` of `r`, entries `< head_dim²`; shared indices below
        // `TILE_ROWS · head_dim · parts` (units `parts · head_dim`).
        unsafe {
            rotary_kernel::launch_unchecked(
                &ops.q.client.clone(),
                CubeCount::Static(rows.div_ceil(TILE_ROWS as usize) as u32, streams as u32, 1),
                CubeDim::new_1d(geo.units()),
                ops.q.into_array_arg(),
                ops.k.into_array_arg(),
                cos.into_array_arg(),
                sin.into_array_arg(),
                positions.into_array_arg(),
                r.into_array_arg(),
                q_out.clone().into_array_arg(),
                k_out.clone().into_array_arg(),
                RowLayoutLaunch::new(
                    seq as u32,
                    k_seq as u32,
                    group as u32,
                    kv_heads as u32,
                    q_batch,
                    q_head,
                    q_position,
                    k_batch,
                    k_head,
                    k_position,
                ),
                max_position as u32,
                geo,
                [x_dtype.into(), ops.dtypes[0].into(), ops.dtypes[1].into()],
            )
        };
    }
    [q_out, k_out]
}

/// A layer's queries `q: [batch · seq, heads · head_dim]` and keys `k: [batch · seq, kv_heads ·
/// head_dim]` (one float type, rows batch-major) rotated by `positions` `[batch · seq]` with the
/// tables `cos`, `sin` `[max_position, head_dim / 2]` (f32), then multiplied by `rotation`
/// (`[kv_heads, head_dim, head_dim]`, f32; query heads `h · group ..` take KV head `h`'s) where
/// given, in one launch: queries `[batch, heads, seq, head_dim]` in f32 and keys `[batch,
/// kv_heads, seq, head_dim]` in `k_dtype`, the f32 results rounded once. Positions must be `<
/// max_position` (the caller checks them; they stay on the device); one past the tables takes
/// the last angle. Callers check [`rotary_applies`].
///
/// # Panics
/// If the shapes disagree.
#[allow(clippy::too_many_arguments)]
pub fn rotary_qk<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 2>,
    k: Tensor<CubeF32<R, BT>, 2>,
    [batch, heads, kv_heads]: [usize; 3],
    cos: &Tensor<CubeF32<R, BT>, 2>,
    sin: &Tensor<CubeF32<R, BT>, 2>,
    positions: &Tensor<CubeF32<R, BT>, 1, Int>,
    rotation: Option<&Tensor<CubeF32<R, BT>, 3>>,
    k_dtype: DType,
) -> [Tensor<CubeF32<R, BT>, 4>; 2] {
    let ([rows, width], [max_position, half]) = (q.dims(), cos.dims());
    let d = 2 * half;
    assert!(max_position > 0 && sin.dims() == cos.dims(), "rotary: tables {:?} and {:?}", cos.dims(), sin.dims());
    assert!(heads > 0 && kv_heads > 0 && heads.is_multiple_of(kv_heads), "rotary: {heads} heads over {kv_heads}");
    assert!(batch > 0 && rows.is_multiple_of(batch), "rotary: {rows} rows in {batch} batch rows");
    assert_eq!(width, heads * d, "rotary: query rows of {width} for {heads} heads of {d}");
    assert_eq!(k.dims(), [rows, kv_heads * d], "rotary: keys {:?} for {rows} rows", k.dims());
    assert_eq!(positions.dims(), [rows], "rotary: {rows} rows, positions {:?}", positions.dims());
    assert_eq!(q.dtype(), k.dtype(), "rotary: queries in {:?}, keys in {:?}", q.dtype(), k.dtype());
    if let Some(r) = rotation {
        assert_eq!(r.dims(), [kv_heads, d, d], "rotary: rotations {:?}", r.dims());
        assert_eq!(r.dtype(), DType::F32, "rotary: rotations in {:?}", r.dtype());
    }
    let seq = rows / batch;
    let ops = Operands {
        q: float_arg(&q),
        k: float_arg(&k),
        rope: Some(Rope { cos: float_arg(cos), sin: float_arg(sin), positions: int_arg(positions), max_position }),
        rotation: rotation.map(float_arg),
        shape: [seq, seq, heads / kv_heads, kv_heads, batch],
        strides: [[seq * heads * d, d, heads * d], [seq * kv_heads * d, d, kv_heads * d]],
        head_dim: d,
        dtypes: [DType::F32, k_dtype],
    };
    let [q_out, k_out] = launch(ops);
    let as_heads = |t: CubeTensor<R>, heads: usize| {
        Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(t)).reshape([batch, heads, seq, d])
    };
    [as_heads(q_out, heads), as_heads(k_out, kv_heads)]
}

/// `x: [batch, heads, n, head_dim]` (contiguous) multiplied per KV head by `r: [kv_heads,
/// head_dim, head_dim]` (f32; query heads `h · group ..` take KV head `h`'s), in `dtype`: the
/// f32 sums rounded once. Callers check [`rotary_applies`] (with a rotation).
///
/// # Panics
/// If the shapes disagree.
pub fn rotate_heads_kernel<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 4>,
    r: &Tensor<CubeF32<R, BT>, 3>,
    dtype: DType,
) -> Tensor<CubeF32<R, BT>, 4> {
    let shape = x.dims();
    let [batch, heads, n, d] = shape;
    let kv_heads = r.dims()[0];
    assert_eq!(r.dims(), [kv_heads, d, d], "rotate: matrices {:?} for heads of {d}", r.dims());
    assert!(kv_heads > 0 && heads.is_multiple_of(kv_heads), "rotate: {heads} heads over {kv_heads} KV heads");
    assert_eq!(r.dtype(), DType::F32, "rotate: matrices in {:?}", r.dtype());
    let x = float_arg(&x);
    let ops = Operands {
        k: x.clone(),
        q: x,
        rope: None,
        rotation: Some(float_arg(r)),
        shape: [n, 0, heads / kv_heads, kv_heads, batch],
        strides: [[heads * n * d, n * d, d], [0; 3]],
        head_dim: d,
        dtypes: [dtype, dtype],
    };
    let [out, _] = launch(ops);
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape(shape)
}
