//! The fused HACK prefill attention kernel (many query slots), flash-attention style.
//!
//! One cube per (sequence, KV head, tile of `queries` query slots). Its `rows` are the tile's
//! (query, head) pairs of every query head of the KV head, query-major (`row = i · group + g`),
//! padded with dead rows to a multiple of 4; rows pair up two to a packed `u32` (16-bit lanes),
//! so one integer multiply by a K or V code serves two rows, as in the decode kernel.
//!
//! 1. Q to 8 bits per (row, key channel group), once per cube: codes packed in row pairs, with
//!    min, scale and code sum (`prefill_scores::quantize_queries`).
//! 2. For each Π-slot block of keys that a row of the tile may see, in order (online softmax):
//!    a. the block's packed key words and metadata are staged in shared memory (`stage_keys`);
//!    b. scores: each unit takes 4 rows × 2 keys; integer dot products of the Q codes with the K
//!    codes per channel group, plus Eq. 4's corrections with the cached K sums, scaled;
//!    invisible pairs masked (`block_scores`);
//!    c. row statistics: the block's min and max score per row (`stat_lanes` units per row
//!    pair), the running max `m`, the rescaling `α = exp(m_old − m)` of what came before, and
//!    for a closed block P's 8-bit min and scale: the min/max of `p = exp(s − m)` (the same
//!    codes as quantizing the normalized P, up to float rounding, see the reference)
//!    (`prefill_values::score_ranges`, `block_weights`);
//!    d. each unit codes its keys' `p` for both rows of its pair into one packed word (a tail
//!    block keeps the f32 `p`), with partial masses and code sums; one unit per row adds them
//!    up and keeps the row's running mass `l`;
//!    e. P·V: each unit owns `output_rows` rows of one channel and accumulates, after rescaling
//!    by `α`, Eq. 4 over the block (P codes, unpacked V codes, the cached V sums) in passes of
//!    `pass_rows` rows, or `p · v` in f32 over the tail's slots (`closed_block_values`,
//!    `tail_values`).
//! 3. Each unit writes its rows' `o / l`.
//!
//! Integer sums stay exact: a 16-bit lane's sum over one packed word is below 2^16 (16 codes ·
//! 255 · 3 at 2 bits, 8 · 255 · 15 at 4), and is added to 32-bit accumulators after every word.
//! Key blocks start at multiples of Π, so each is either a closed V block or lies in the tail.

use burn_kvcompress::kernels::{first_visible_slot, masked_score as masked};
use cubecl::prelude::*;

use super::prefill_scores::{block_scores, key_tile, quantize_queries, query_tile, stage_keys};
use super::prefill_values::{block_weights, closed_block_values, row_partials, score_ranges, tail_values, weight_tile};

/// Rows per score item (two row pairs).
pub(super) const SCORE_ROWS: u32 = 4;
/// Keys per score item.
pub(super) const SCORE_KEYS: u32 = 2;
/// At most this many units share the statistics of one row pair.
const MAX_STAT_LANES: u32 = 8;
/// Static shared memory a CUDA kernel may declare.
const MAX_SHARED_BYTES: u32 = 48 * 1024;

/// Shapes fixed at compile time (one compiled kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefillGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Channels per key group: a multiple of 16, so whole packed words.
    pub key_group: u32,
    /// Π: slots per key block (a multiple of 16, so whole packed value words).
    pub partition: u32,
    /// K/V code width.
    pub bits: u32,
    /// Query slots per cube.
    pub queries: u32,
    /// Rows per cube: `group · queries` rounded up to a multiple of 4.
    pub rows: u32,
    /// Rows each unit accumulates outputs for (even, divides `rows`).
    pub output_rows: u32,
}

impl PrefillGeometry {
    /// The geometry for `group` heads per KV head and `queries` query slots per cube: rows
    /// rounded up to a multiple of 4, and the fewest output rows per unit that keep a cube at
    /// 256 units or fewer.
    pub fn new(group: u32, head_dim: u32, key_group: u32, partition: u32, bits: u32, queries: u32) -> Self {
        let rows = (group * queries).div_ceil(SCORE_ROWS) * SCORE_ROWS;
        let output_rows = (1..=rows / 2)
            .map(|pairs| 2 * pairs)
            .find(|&n| rows.is_multiple_of(n) && rows / n * head_dim <= 256)
            .unwrap_or(rows);
        Self { group, head_dim, key_group, partition, bits, queries, rows, output_rows }
    }

    /// Units per cube: one per (output row group, channel).
    pub fn units(&self) -> u32 {
        self.rows / self.output_rows * self.head_dim
    }

    /// Rows per pass of the value phase: the largest of 8, 4 and 2 that divides `output_rows`.
    pub fn pass_rows(&self) -> u32 {
        [8, 4, 2].into_iter().find(|n| self.output_rows.is_multiple_of(*n)).unwrap_or(2)
    }

    /// Units that share the statistics of one row pair.
    pub fn stat_lanes(&self) -> u32 {
        (2 * self.units() / self.rows).min(MAX_STAT_LANES)
    }

    /// Packed words per key row.
    pub(super) fn words_per_key(&self) -> u32 {
        self.head_dim * self.bits / 32
    }

    /// Key channel groups.
    pub(super) fn parts(&self) -> u32 {
        self.head_dim / self.key_group
    }

    /// Bytes of shared memory the kernel declares: Q codes and metadata, the staged key block,
    /// scores, P codes, per-row statistics and the statistics' partials.
    pub fn shared_bytes(&self) -> u32 {
        let (rows, pi, parts) = (self.rows, self.partition, self.parts());
        let q = rows / 2 * self.head_dim + 3 * rows * parts;
        let keys = (self.words_per_key() + 3 * parts) * pi;
        let scores = rows * pi + rows / 2 * pi;
        let row_stats = 5 * rows + 4 * rows * self.stat_lanes();
        4 * (q + keys + scores + row_stats)
    }

    /// Whether the kernel's shared memory fits a device that gives a cube `device_bytes` (and the
    /// static 48 KiB a CUDA kernel may declare), and a cube needs at most 256 units.
    pub fn fits(&self, device_bytes: usize) -> bool {
        self.units() <= 256 && self.shared_bytes() as usize <= device_bytes.min(MAX_SHARED_BYTES as usize)
    }
}

/// One tile of HACK prefill attention; see the module documentation.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn prefill_kernel(
    q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    key_meta_pitch: u32,
    len: u32,
    q_len: u32,
    blocks: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: PrefillGeometry,
) {
    let stream = CUBE_POS_Y; // batch row * kv_heads + kv head
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let batch_row = stream / kv_heads;
    let start = key_start[batch_row as usize];
    let t = UNIT_POS;
    let group = geo.group;
    let d = geo.head_dim;
    let pi = geo.partition;
    let rows = geo.rows;
    let live_rows = comptime!(geo.group * geo.queries);
    let lanes = comptime!(geo.stat_lanes());
    let output_rows = comptime!(geo.output_rows);
    let first_query = CUBE_POS_X * geo.queries; // index among the q_len queries
    let first_pos = len - q_len; // slot of query 0
    let quantized_len = blocks * pi;
    let tail_len = len - quantized_len;

    let mut queries = query_tile(geo);
    let mut keys = key_tile(geo);
    let mut s = SharedMemory::<f32>::new(comptime!((geo.rows * geo.partition) as usize));
    let mut weights = weight_tile(geo);
    let mut alpha = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut row_mass = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut partials = row_partials(geo);

    quantize_queries(q, &mut queries, stream, first_query, q_len, geo);

    // The key blocks any row of the tile sees.
    let last_query = u32::min(first_query + geo.queries, q_len) - 1;
    let first_block = first_visible_slot(first_pos + first_query, start, window) / pi;
    let last_block = (first_pos + last_query) / pi;

    // Row statistics (units `t < pairs · lanes`): `stat_pair`'s two rows, this unit's lane.
    let stat_pair = t / lanes;
    let lane = t % lanes;
    let mut run_max = Array::<f32>::new(2usize);
    run_max[0] = masked();
    run_max[1] = masked();
    // The running mass of row `t` (units `t < rows`).
    let mut mass = 0.0f32;
    // Outputs: rows `out_row0 ..` of channel `out_c`.
    let out_row0 = (t / d) * output_rows;
    let out_c = t % d;
    let mut acc = Array::<f32>::new(comptime!(geo.output_rows as usize));
    #[unroll]
    for r in 0..output_rows {
        acc[r as usize] = 0.0;
    }

    for kb in first_block..last_block + 1 {
        let block_first = kb * pi;
        let closed = kb < blocks;
        sync_cube();
        stage_keys(k_words, k_params, k_sums, &mut keys, stream, len, block_first, key_meta_pitch, geo);
        sync_cube();
        block_scores(&keys, &queries, &mut s, block_first, first_query, first_pos, q_len, start, window, scale, geo);
        sync_cube();
        score_ranges(&s, &mut partials, stat_pair, lane, geo);
        sync_cube();
        block_weights(&mut s, &mut weights, &mut alpha, &mut partials, &mut run_max, stat_pair, lane, closed, geo);
        sync_cube();
        // The block's mass and code sums per row (units `t < rows`).
        if t < rows {
            let mut block_mass = 0.0f32;
            let mut codes = 0.0f32;
            for l in 0..lanes {
                block_mass += partials.mass[(t * lanes + l) as usize];
                codes += partials.codes[(t * lanes + l) as usize];
            }
            mass = mass * alpha[t as usize] + block_mass;
            weights.sum[t as usize] = codes;
        }
        sync_cube();

        // e. P·V for rows `out_row0 ..` of channel `out_c`, after rescaling by α.
        #[unroll]
        for r in 0..output_rows {
            acc[r as usize] *= alpha[(out_row0 + r) as usize];
        }
        if closed {
            closed_block_values(
                v_words, v_params, v_sums, &weights, &mut acc, stream, blocks, kb, out_row0, out_c, geo,
            );
        } else {
            tail_values(tail, &s, &mut acc, stream, len, block_first, quantized_len, tail_len, out_row0, out_c, geo);
        }
    }

    // 3. Normalize and write the live rows.
    sync_cube();
    if t < rows {
        row_mass[t as usize] = mass;
    }
    sync_cube();
    #[unroll]
    for r in 0..output_rows {
        let row = out_row0 + r;
        let (i, g) = (row / group, row % group);
        if row < live_rows && first_query + i < q_len {
            let at = ((stream * group + g) * q_len + first_query + i) * d + out_c;
            out[at as usize] = acc[r as usize] / row_mass[row as usize];
        }
    }
}
