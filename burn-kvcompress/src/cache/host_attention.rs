//! Attention of many query slots on the host, for the CPU backends: flash-attention tiles over the
//! keys with an online softmax (no `q_len × total_len` score or mask tensor), the tiles' products
//! by `gemm` (SIMD kernels chosen at run time, AVX-512 where the CPU has it), query tiles in
//! parallel on rayon's threads. Same semantics as
//! [`attention_reference`](super::attention_reference) (GQA, causal, left padding, sliding
//! window; [`AttendOptions::allows`]), up to the order of the f32 sums and an `exp` within 3 ε relative
//! ([`exp_nonpositive`]).
//!
//! Burn's ops on the CPU backends build the mask from index tensors, fill it into a materialized
//! score tensor, scale, softmax and multiply in separate passes, mostly on one core; at a
//! 512-token prompt of SmolLM2 that took 32 ms a layer, the most expensive op of a prefill.

use rayon::prelude::*;

use super::AttendOptions;

/// Query slots of one head per task.
const QUERY_TILE: usize = 64;
/// Key slots per step of a task's online softmax.
const KEY_TILE: usize = 128;

/// The shapes of a host attention call: queries `[batch, heads, q_len, head_dim]`, keys
/// `[batch, kv_heads, total_len, head_dim]`, values `[batch, kv_heads, total_len, value_dim]`,
/// the queries being the last `q_len` of `total_len` slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostShape {
    /// Sequences.
    pub batch: usize,
    /// Query heads (a multiple of `kv_heads`).
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Query slots per sequence.
    pub q_len: usize,
    /// Cached slots per sequence.
    pub total_len: usize,
    /// Channels of a query or key head.
    pub head_dim: usize,
    /// Channels of a value head.
    pub value_dim: usize,
}

/// Scaled-dot-product attention on row-major host slices (shapes in [`HostShape`]); returns the
/// outputs `[batch, heads, q_len, value_dim]`.
///
/// # Panics
/// If a slice's length does not match `shape`, or `options.key_start` has not `batch` rows.
pub fn host_attention(q: &[f32], k: &[f32], v: &[f32], shape: HostShape, options: &AttendOptions) -> Vec<f32> {
    let HostShape { batch, heads, kv_heads, q_len, total_len, head_dim, value_dim } = shape;
    assert_eq!(q.len(), batch * heads * q_len * head_dim, "queries");
    assert_eq!(k.len(), batch * kv_heads * total_len * head_dim, "keys");
    assert_eq!(v.len(), batch * kv_heads * total_len * value_dim, "values");
    assert_eq!(options.key_start.len(), batch, "key_start rows");
    let group = heads / kv_heads;
    let mut out = vec![0.0f32; batch * heads * q_len * value_dim];
    out.par_chunks_mut(q_len * value_dim).enumerate().for_each(|(stream, head_out)| {
        let (b, head) = (stream / heads, stream % heads);
        let kv = b * kv_heads + head / group;
        let keys = &k[kv * total_len * head_dim..(kv + 1) * total_len * head_dim];
        let values = &v[kv * total_len * value_dim..(kv + 1) * total_len * value_dim];
        let queries = &q[stream * q_len * head_dim..(stream + 1) * q_len * head_dim];
        head_out.par_chunks_mut(QUERY_TILE * value_dim).enumerate().for_each(|(tile, tile_out)| {
            let first = tile * QUERY_TILE;
            let rows = tile_out.len() / value_dim;
            let task = QueryTile {
                queries: &queries[first * head_dim..(first + rows) * head_dim],
                first_slot: total_len - q_len + first,
                keys,
                values,
                head_dim,
                value_dim,
                key_start: options.key_start[b],
                window: options.window,
                scale: options.scale,
            };
            task.attend(tile_out);
        });
    });
    out
}

/// One task: `rows` consecutive query slots of one head (from `first_slot`) over their KV head.
struct QueryTile<'a> {
    /// `[rows, head_dim]`.
    queries: &'a [f32],
    first_slot: usize,
    /// `[total_len, head_dim]`.
    keys: &'a [f32],
    /// `[total_len, value_dim]`.
    values: &'a [f32],
    head_dim: usize,
    value_dim: usize,
    key_start: usize,
    window: Option<usize>,
    scale: f32,
}

impl QueryTile<'_> {
    /// The key slots the query at `slot` sees, an interval `[from, slot]`: itself only before
    /// the sequence's first real slot (padding), else from the later of that slot and the
    /// window's start ([`AttendOptions::allows`]).
    fn visible(&self, slot: usize) -> (usize, usize) {
        if slot < self.key_start {
            return (slot, slot);
        }
        let window_start = self.window.map_or(0, |w| (slot + 1).saturating_sub(w));
        (self.key_start.max(window_start), slot)
    }

    /// Writes the tile's outputs `[rows, value_dim]` into `out`.
    fn attend(&self, out: &mut [f32]) {
        let rows = self.queries.len() / self.head_dim;
        let visible: Vec<(usize, usize)> = (0..rows).map(|r| self.visible(self.first_slot + r)).collect();
        let from = visible.iter().map(|&(a, _)| a).min().unwrap_or(0);
        let to = self.first_slot + rows;
        let mut top = vec![f32::NEG_INFINITY; rows];
        let mut mass = vec![0.0f32; rows];
        let mut scores = vec![0.0f32; rows * KEY_TILE];
        out.fill(0.0);
        for first_key in (from..to).step_by(KEY_TILE) {
            let keys = KEY_TILE.min(to - first_key);
            // scores[r, j] = scale · q_r · k_{first_key + j}
            product(
                Operand { data: &mut scores, row_stride: KEY_TILE, column_stride: 1 },
                Matrix { data: self.queries, row_stride: self.head_dim, column_stride: 1 },
                Matrix { data: &self.keys[first_key * self.head_dim..], row_stride: 1, column_stride: self.head_dim },
                [rows, keys, self.head_dim],
                self.scale,
                false,
            );
            for (r, &(a, b)) in visible.iter().enumerate() {
                let row = &mut scores[r * KEY_TILE..r * KEY_TILE + keys];
                let lo = a.max(first_key).saturating_sub(first_key);
                let hi = (b + 1).min(first_key + keys).saturating_sub(first_key);
                if lo >= hi {
                    row.fill(0.0);
                    continue;
                }
                let seen = &row[lo..hi];
                let new_top = seen.iter().copied().fold(top[r], f32::max);
                let keep = (top[r] - new_top).exp();
                top[r] = new_top;
                row[..lo].fill(0.0);
                row[hi..].fill(0.0);
                let seen = &mut row[lo..hi];
                seen.iter_mut().for_each(|s| *s -= new_top);
                exp_nonpositive(seen);
                mass[r] = mass[r] * keep + seen.iter().sum::<f32>();
                out[r * self.value_dim..(r + 1) * self.value_dim].iter_mut().for_each(|o| *o *= keep);
            }
            // out[r] += Σ_j p[r, j] · v_{first_key + j}
            product(
                Operand { data: out, row_stride: self.value_dim, column_stride: 1 },
                Matrix { data: &scores, row_stride: KEY_TILE, column_stride: 1 },
                Matrix {
                    data: &self.values[first_key * self.value_dim..],
                    row_stride: self.value_dim,
                    column_stride: 1,
                },
                [rows, self.value_dim, keys],
                1.0,
                true,
            );
        }
        for (r, row) in out.chunks_mut(self.value_dim).enumerate() {
            row.iter_mut().for_each(|o| *o /= mass[r]);
        }
    }
}

/// A matrix read from a slice by strides (elements).
struct Matrix<'a> {
    data: &'a [f32],
    row_stride: usize,
    column_stride: usize,
}

/// A matrix written into a slice by strides (elements).
struct Operand<'a> {
    data: &'a mut [f32],
    row_stride: usize,
    column_stride: usize,
}

/// The last element a `[rows, columns]` matrix with these strides reaches, plus one.
fn extent(rows: usize, columns: usize, row_stride: usize, column_stride: usize) -> usize {
    (rows - 1) * row_stride + (columns - 1) * column_stride + 1
}

/// `dst = (accumulate ? dst : 0) + factor · lhs · rhs` for `[m, n, k] = dims` (`lhs` `[m, k]`,
/// `rhs` `[k, n]`, `dst` `[m, n]`), by `gemm` on the calling thread.
///
/// # Panics
/// If an operand's slice is shorter than its strides reach.
fn product(dst: Operand<'_>, lhs: Matrix<'_>, rhs: Matrix<'_>, [m, n, k]: [usize; 3], factor: f32, accumulate: bool) {
    assert!(m > 0 && n > 0 && k > 0);
    assert!(dst.data.len() >= extent(m, n, dst.row_stride, dst.column_stride));
    assert!(lhs.data.len() >= extent(m, k, lhs.row_stride, lhs.column_stride));
    assert!(rhs.data.len() >= extent(k, n, rhs.row_stride, rhs.column_stride));
    let stride = |s: usize| s as isize;
    // SAFETY: the asserts above keep every element the strides reach inside its slice, and `dst`
    // is borrowed mutably, so it overlaps neither operand.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            stride(dst.column_stride),
            stride(dst.row_stride),
            accumulate,
            lhs.data.as_ptr(),
            stride(lhs.column_stride),
            stride(lhs.row_stride),
            rhs.data.as_ptr(),
            stride(rhs.column_stride),
            stride(rhs.row_stride),
            1.0,
            factor,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `e^x` in place for `x ≤ 0` (scores less their max), within `3 ε` relative above
/// `-87` and about `2⁻¹²⁶` below: `x = n ln 2 + r` with `|r| ≤ ln 2 / 2`, `e^r` by its degree-6
/// Taylor polynomial (truncation below `1.2 · 10⁻⁷` relative), `2ⁿ` by the exponent bits. A loop
/// the compiler vectorizes, where libm's `expf` is one call per element.
pub fn exp_nonpositive(xs: &mut [f32]) {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n · LN2_HIGH` is exact for |n| < 2⁸.
    const LN2_HIGH: f32 = 0.693_145_75;
    const LN2_LOW: f32 = 1.428_606_8e-6;
    // Adding then subtracting 1.5 · 2²³ rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    for x in xs.iter_mut() {
        let clamped = x.max(-87.0);
        let n = (clamped * LOG2_E + ROUND) - ROUND;
        let r = (clamped - n * LN2_HIGH) - n * LN2_LOW;
        let p =
            1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
        let power = f32::from_bits((((n as i32) + 127) as u32) << 23);
        *x = p * power;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_three_epsilon_on_its_range() {
        let mut worst = 0.0f64;
        let mut xs: Vec<f32> = (0..200_000).map(|i| -(i as f32) * 87.0 / 200_000.0).collect();
        xs.extend([0.0, -1e-30, -0.346, -0.347, -86.99]);
        let mut ys = xs.clone();
        exp_nonpositive(&mut ys);
        for (&x, &y) in xs.iter().zip(&ys) {
            let exact = (x as f64).exp();
            worst = worst.max((y as f64 - exact).abs() / exact / f32::EPSILON as f64);
        }
        assert!(worst <= 3.0, "worst relative error {worst} ε");
        let mut far = [-100.0f32, f32::MIN];
        exp_nonpositive(&mut far);
        assert!(far.iter().all(|&y| (0.0..1e-37).contains(&y)), "{far:?}");
    }
}
