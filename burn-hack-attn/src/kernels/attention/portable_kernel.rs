//! The fused HACK decode attention kernel (one query slot per sequence), flash-decoding style.
//!
//! One cube per (sequence, KV head, chunk of `chunk` slots), one unit per slot of the chunk; it
//! serves all `group` query heads of its KV head, so each packed key and value word is read and
//! unpacked once per cube:
//! 1. read the group's 8-bit query codes per (head, key channel group) and their min, scale and
//!    code sum, which [`query_kernel`](super::query_kernel) computed once per (sequence, KV head)
//!    for all of its chunks;
//! 2. each unit scores its slot for every head: integer dot products of Q codes with the K codes
//!    per channel group, plus Eq. 4's corrections with the cached K sums, scaled; masked slots
//!    excluded (`portable_scores::slot_scores`);
//! 3. per (head, Π-block of the chunk): min/max score trees give the head's max `m` and the
//!    block's min/max of `p = exp(s − m)`; each unit quantizes its own `p` to 8 bits (the block's
//!    min/max of the unnormalized `p`: the same codes as quantizing the normalized P, up to float
//!    rounding); sum trees give each block's mass and P code sum (`portable_values::block_weights`);
//! 4. per channel, for every head: Σ over closed blocks of Eq. 4 on P codes and unpacked V codes
//!    with the cached V sums, plus `p · v` in f32 over the tail's slots; the chunk's blocks are
//!    split over `chunk / head_dim` units per channel and their sums added in shared memory
//!    (`chunk_values`);
//! 5. write the unnormalized output, `m` and `l = Σ p` of the chunk;
//!    `burn_kvcompress::kernels::merge_kernel` combines the chunks with a log-sum-exp.
//!
//! The integer products pack two heads' 8-bit codes into one `u32` (16-bit lanes): one multiply by
//! a K or V code serves both heads. A lane's sum over one packed word stays below 2^16
//! (16 codes · 255 · 3 at 2 bits, 8 · 255 · 15 at 4), and it is added to the heads' `u32` dot
//! products after every word.
//!
//! Chunks start at multiples of Π (`chunk` is a multiple of Π), so each of a chunk's blocks is
//! either a closed block or lies in the tail.

use burn_kvcompress::kernels::SplitOut;
use cubecl::prelude::*;

use super::portable_scores::slot_scores;
use super::portable_values::{block_weights, chunk_values};
use super::query_kernel::QueryShape;

/// Shapes fixed at compile time (one compiled kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Channels per key group: a multiple of 16 (`HackCache::check_supported`), so whole packed
    /// words.
    pub key_group: u32,
    /// Π.
    pub partition: u32,
    /// K/V code width.
    pub bits: u32,
    /// Slots per cube (a multiple of Π), and units per cube.
    pub chunk: u32,
}

/// Static shared memory a CUDA kernel may declare.
const MAX_SHARED_BYTES: u32 = 48 * 1024;

impl DecodeGeometry {
    /// Bytes of shared memory the kernel declares: two tree scratch arrays, the f32 numerators,
    /// the packed Q and P codes and the per-run metadata.
    pub fn shared_bytes(&self) -> u32 {
        let metadata = self.group * (3 * self.head_dim / self.key_group + 4 * self.chunk / self.partition);
        4 * (2 * self.scratch() + self.group * self.chunk + self.head_pairs() * (self.head_dim + self.chunk) + metadata)
    }

    /// Whether the kernel's shared memory fits a device that gives a cube `device_bytes` (and the
    /// static 48 KiB a CUDA kernel may declare). It grows with the group and the head size:
    /// lavapipe's 32 KiB take 8 query heads per KV head at 128 channels, not at 256.
    pub fn fits(&self, device_bytes: usize) -> bool {
        self.shared_bytes() as usize <= device_bytes.min(MAX_SHARED_BYTES as usize)
    }

    /// Pairs of heads whose codes share a packed word (the last one half empty for an odd group).
    pub fn head_pairs(&self) -> u32 {
        self.queries().pairs()
    }

    /// The shape of the group's queries.
    pub fn queries(&self) -> QueryShape {
        QueryShape { group: self.group, head_dim: self.head_dim, key_group: self.key_group }
    }

    /// Units per channel in the value phase: each takes every `value_splits`-th block of the
    /// chunk.
    pub fn value_splits(&self) -> u32 {
        (self.chunk / self.head_dim).clamp(1, self.chunk / self.partition)
    }

    /// Length of the two tree scratch arrays: a score per (head, slot), or a partial output per
    /// (value split, head, channel).
    fn scratch(&self) -> u32 {
        self.group * self.chunk.max(self.head_dim)
    }
}

/// One chunk of HACK decode attention; see the module documentation.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn decode_kernel(
    q_codes: &Array<u32>,
    q_meta: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    key_meta_pitch: u32,
    len: u32,
    blocks: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: DecodeGeometry,
) {
    let splits = CUBE_COUNT_X;
    let split = CUBE_POS_X;
    let stream = CUBE_POS_Y; // batch row * kv_heads + kv head
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let batch_row = stream / kv_heads;
    let t = UNIT_POS; // this unit's slot in the chunk
    let units = CUBE_DIM;
    let group = geo.group;
    let pairs = comptime!(geo.head_pairs());
    let d = geo.head_dim;
    let chunk = geo.chunk;
    let pi = geo.partition;
    let chunk_blocks = comptime!(geo.chunk / geo.partition);
    let first = split * chunk;
    let quantized_len = blocks * pi;
    let tail_len = len - quantized_len;

    let mut lo = SharedMemory::<f32>::new(comptime!(geo.scratch() as usize));
    let mut hi = SharedMemory::<f32>::new(comptime!(geo.scratch() as usize));
    let mut q_pairs = SharedMemory::<u32>::new(comptime!((geo.head_pairs() * geo.head_dim) as usize));
    let mut q_min = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim / geo.key_group) as usize));
    let mut q_scale = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim / geo.key_group) as usize));
    let mut q_sum = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim / geo.key_group) as usize));
    let mut p = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk) as usize));
    let mut p_pairs = SharedMemory::<u32>::new(comptime!((geo.head_pairs() * geo.chunk) as usize));
    let mut p_min = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));
    let mut p_scale = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));
    let mut p_sum = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));
    let mut block_mass = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));

    // 1. The group's 8-bit query codes (two heads per word) and their runs' metadata, from
    //    `query_kernel`.
    let runs = comptime!(geo.group * geo.head_dim / geo.key_group);
    let mut item = t;
    while item < pairs * d {
        q_pairs[item as usize] = q_codes[(stream * pairs * d + item) as usize];
        item += units;
    }
    let mut run = t;
    while run < runs {
        let at = stream * 3 * runs + run;
        q_min[run as usize] = q_meta[at as usize];
        q_scale[run as usize] = q_meta[(at + runs) as usize];
        q_sum[run as usize] = q_meta[(at + 2 * runs) as usize];
        run += units;
    }
    sync_cube();

    // 2. This unit's slot, scored for every head.
    let slot = first + t;
    let score = slot_scores(
        k_words,
        k_params,
        k_sums,
        key_start,
        &q_pairs,
        &q_min,
        &q_scale,
        &q_sum,
        stream,
        batch_row,
        slot,
        key_meta_pitch,
        len,
        window,
        scale,
        geo,
    );

    // 3. Softmax numerators and P to 8 bits per (head, block).
    let head_max = block_weights(
        &score,
        &mut lo,
        &mut hi,
        &mut p,
        &mut p_pairs,
        &mut p_min,
        &mut p_scale,
        &mut p_sum,
        &mut block_mass,
        first,
        quantized_len,
        geo,
    );
    sync_cube();

    // 4. Per channel, for every head: Eq. 4 over the closed blocks, f32 over the tail.
    chunk_values(
        v_words,
        v_params,
        v_sums,
        tail,
        &p,
        &p_pairs,
        &p_min,
        &p_scale,
        &p_sum,
        &mut lo,
        stream,
        len,
        blocks,
        first,
        quantized_len,
        tail_len,
        geo,
    );
    sync_cube();

    let value_splits = comptime!(geo.value_splits());
    // 5. The chunk's unnormalized output, max and mass per head.
    let mut item = t;
    while item < group * d {
        let (g, c) = (item / d, item % d);
        let mut total = 0.0f32;
        #[unroll]
        for part in 0..value_splits {
            total += lo[((part * group + g) * d + c) as usize];
        }
        let target = SplitOut { first_head: stream * group, split, splits };
        target.write_output(out, g, c, total, d);
        if c == 0 {
            let mut l = 0.0f32;
            for bb in 0..chunk_blocks {
                l += block_mass[(g * chunk_blocks + bb) as usize];
            }
            target.write_stats(out_max, out_sum, g, head_max[g as usize], l);
        }
        item += units;
    }
}
