//! The fused PQ decode attention kernel (one query slot per sequence), flash-decoding style.
//!
//! One cube per (sequence, KV head, split); it serves all `group` query heads of its KV head, so
//! each code word and recent vector is read once per cube. A split covers `chunk` slots of the
//! coded range, or of the recent window:
//! 1. scores. A coded split walks the subspaces in blocks: the block's part of the lookup table
//!    `T` (query · key centroid, already scaled, built once per step by
//!    [`table_kernel`](super::table::table_kernel)) is staged in shared memory, then each unit adds
//!    `T[i, code_i]` for its slots (`chunk / units` of them, held in registers for all heads), in
//!    subspace order. A recent slot scores `q · k` in f32, scaled. Masked slots (padding, sliding
//!    window) are excluded;
//! 2. per head, the split's max score `m`, `p = exp(s - m)` ([`split_softmax`]);
//! 3. values. In a coded split one unit per (subspace, part) walks the part's slots, reads the
//!    slot's value code and centroid once and adds `p · centroid` for all heads; the parts are then
//!    summed in shared memory. A recent split sums `p · v` per (head, channel);
//! 4. the unnormalized output, `m` and `l = Σ p` go to the log-sum-exp merge
//!    (`burn_kvcompress::kernels::merge_partials`).

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_softmax};
use cubecl::prelude::*;

use super::table::DecodeShape;

/// Shapes fixed at compile time (one compiled kernel per model geometry, configuration and split
/// length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    /// The step's shapes.
    pub shape: DecodeShape,
    /// Slots per split, a multiple of `units`.
    pub chunk: u32,
    /// Units per cube.
    pub units: u32,
    /// Subspaces whose table entries a cube stages at once.
    pub block_subspaces: u32,
    /// Parts of a split whose value sums run on separate units (per subspace).
    pub parts: u32,
}

impl DecodeGeometry {
    /// Code words per slot a table block covers: a block is whole words, or part of one.
    pub fn block_words(&self) -> u32 {
        (self.block_subspaces / (32 / self.shape.pq.nbits)).max(1)
    }

    /// Floats of a table block each unit loads.
    pub fn table_fill(&self) -> u32 {
        (self.block_subspaces * self.shape.pq.centroids * self.shape.group).div_ceil(self.units)
    }

    /// Slots a value unit loads at once: 16 centroid floats in flight.
    pub fn value_batch(&self) -> u32 {
        (16 / self.shape.pq.sub_dim).max(1)
    }

    /// Floats of the scratch buffer: the staged table block, then the parts' value sums and masses.
    pub fn scratch_floats(&self) -> u32 {
        let s = self.shape;
        u32::max(self.block_subspaces * s.pq.centroids * s.group, self.parts * s.group * (s.pq.head_dim + 1))
    }

    /// Shared memory of one cube, in bytes: scratch, scores, the heads' maxima and the softmax's
    /// 16 lane maxima per head.
    pub fn shared_bytes(&self) -> u32 {
        4 * (self.scratch_floats() + self.shape.group * (self.chunk + 17))
    }
}

/// One split of PQ decode attention; see the module documentation.
///
/// - `table`: `[batch, kv_heads, subspaces, centroids, group]`;
/// - `k_codes`, `v_codes`: `[batch, kv_heads, coded, words]`; `v_books`: `[groups, subspaces,
///   centroids, sub_dim]`; `k_recent`, `v_recent`: `[batch, kv_heads, len - coded, head_dim]`;
/// - `q`: `[batch, kv_heads * group, head_dim]`; `key_start`: `[batch]`;
/// - outputs per (query head, split): `out` (`head_dim` each), `out_max`, `out_sum`.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn decode_kernel(
    q: &Array<f32>,
    table: &Array<f32>,
    k_codes: &Array<u32>,
    v_codes: &Array<u32>,
    v_books: &Array<f32>,
    k_recent: &Array<f32>,
    v_recent: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    coded: u32,
    coded_splits: u32,
    window: u32,
    scale: f32,
    per_head_books: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let split = CUBE_POS_X;
    let stream = CUBE_POS_Y; // batch row * kv_heads + kv head
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let start = key_start[(stream / kv_heads) as usize];
    let group = geo.shape.group;
    let chunk = geo.chunk;
    let is_coded = split < coded_splits;
    // The split's slots: `chunk` of the coded range, or of the recent window; `row` is the
    // first one's row in the code words or in the recent window.
    let mut first = split * chunk;
    let mut end = coded;
    let mut row = stream * coded + first;
    if !is_coded {
        first = coded + (split - coded_splits) * chunk;
        end = len;
        row = stream * (len - coded) + first - coded;
    }
    let count = u32::min(chunk, end - first);
    let visible = Visibility { first, len, start, window };

    let mut p = SharedMemory::<f32>::new((group * chunk) as usize);
    let mut scratch = SharedMemory::<f32>::new(geo.scratch_floats() as usize);
    let mut head_max = SharedMemory::<f32>::new(group as usize);

    let table_base = stream * geo.shape.table_floats();
    coded_scores(table, k_codes, &mut p, &mut scratch, table_base, row, count, is_coded, &visible, geo);
    if !is_coded {
        recent_scores(q, k_recent, &mut p, stream, row, count, scale, &visible, geo);
    }
    sync_cube();
    split_softmax(&mut p, &mut head_max, count, group, chunk);

    let head = stream * group;
    let slot_out = SplitOut { head, split, splits: CUBE_COUNT_X };
    if is_coded {
        let books = (stream % kv_heads) * per_head_books * geo.shape.pq.subspaces;
        coded_value_parts(v_codes, v_books, &p, &mut scratch, row, count, books, geo);
    }
    sync_cube();
    if is_coded {
        sum_value_parts(&scratch, &head_max, out, out_max, out_sum, &slot_out, geo);
    } else {
        recent_values(v_recent, &p, &head_max, out, out_max, out_sum, row, count, &slot_out, geo);
    }
}

/// Which of a split's slots the step's query sees: slot `first + t` of `len`, for a row whose
/// first real slot is `start`, under a sliding window of `window` slots (0 for none).
#[derive(CubeType)]
struct Visibility {
    first: u32,
    len: u32,
    start: u32,
    window: u32,
}

#[cube]
impl Visibility {
    fn sees(&self, t: u32) -> bool {
        decode_slot_visible(self.first + t, self.len, self.start, self.window)
    }
}

/// Where a split's partial results go: query heads `head..head + group`, split `split` of
/// `splits`.
#[derive(CubeType)]
struct SplitOut {
    head: u32,
    split: u32,
    splits: u32,
}

#[cube]
impl SplitOut {
    /// Writes channel `c` of head `g`'s unnormalized output `value`; channel 0 also writes the
    /// head's max and its mass `Σ p`.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        out: &mut Array<f32>,
        out_max: &mut Array<f32>,
        out_sum: &mut Array<f32>,
        head_max: &SharedMemory<f32>,
        g: u32,
        c: u32,
        value: f32,
        mass: f32,
        #[comptime] head_dim: u32,
    ) {
        let at = (self.head + g) * self.splits + self.split;
        out[(at * head_dim + c) as usize] = value;
        if c == 0 {
            out_max[at as usize] = head_max[g as usize];
            out_sum[at as usize] = mass;
        }
    }
}

/// Scores of a coded split into `p[g * chunk + t]` (masked slots hold [`masked_score`]). The
/// table blocks stream through `scratch`, the next block's table entries and code words loading
/// into registers while the current block's lookups run. Every unit of the cube calls it (it
/// synchronizes), and only a coded split reads or writes. `table_base`: the stream's table;
/// `row`: the split's first code row.
#[allow(clippy::too_many_arguments)]
#[cube]
fn coded_scores(
    table: &Array<f32>,
    k_codes: &Array<u32>,
    p: &mut SharedMemory<f32>,
    scratch: &mut SharedMemory<f32>,
    table_base: u32,
    row: u32,
    count: u32,
    is_coded: bool,
    visible: &Visibility,
    #[comptime] geo: DecodeGeometry,
) {
    let shape = geo.shape;
    let group = shape.group;
    let block = geo.block_subspaces;
    let per_unit = comptime!(geo.chunk / geo.units);
    let per_word = comptime!(32 / shape.pq.nbits);
    let held_words = comptime!(per_unit * geo.block_words());
    let mask = (1u32 << shape.pq.nbits) - 1;
    let blocks = comptime!(shape.pq.subspaces.div_ceil(block));
    let mut scores = Array::<f32>::new(comptime!((per_unit * group) as usize));
    #[unroll]
    for e in 0..per_unit * group {
        scores[e as usize] = 0.0;
    }
    let mut next_table = Array::<f32>::new(comptime!(geo.table_fill() as usize));
    let mut next_words = Array::<u32>::new(comptime!(held_words as usize));
    let mut words = Array::<u32>::new(comptime!(held_words as usize));
    if is_coded {
        fetch_block(table, k_codes, &mut next_table, &mut next_words, table_base, row, count, 0, geo);
    }
    for b in 0..blocks {
        let lo = b * block;
        sync_cube();
        if is_coded {
            let floats = (u32::min(lo + block, shape.pq.subspaces) - lo) * shape.pq.centroids * group;
            #[unroll]
            for f in 0..geo.table_fill() {
                let e = f * geo.units + UNIT_POS;
                if e < floats {
                    scratch[e as usize] = next_table[f as usize];
                }
            }
            #[unroll]
            for w in 0..held_words {
                words[w as usize] = next_words[w as usize];
            }
        }
        sync_cube();
        if is_coded {
            if b + 1 < blocks {
                fetch_block(table, k_codes, &mut next_table, &mut next_words, table_base, row, count, b + 1, geo);
            }
            // A block is whole words, or part of one word starting at code `first_code`.
            let first_code = lo % per_word;
            #[unroll]
            for k in 0..per_unit {
                #[unroll]
                for ii in 0..block {
                    if lo + ii < shape.pq.subspaces {
                        let word = words[(k * geo.block_words() + ii / per_word) as usize];
                        let code = (word >> ((first_code + ii % per_word) * shape.pq.nbits)) & mask;
                        let at = (ii * shape.pq.centroids + code) * group;
                        #[unroll]
                        for g in 0..group {
                            scores[(k * group + g) as usize] += scratch[(at + g) as usize];
                        }
                    }
                }
            }
        }
    }
    if is_coded {
        #[unroll]
        for k in 0..per_unit {
            let t = k * geo.units + UNIT_POS;
            if t < count {
                let seen = visible.sees(t);
                #[unroll]
                for g in 0..group {
                    let mut score = masked_score();
                    if seen {
                        score = scores[(k * group + g) as usize];
                    }
                    p[(g * geo.chunk + t) as usize] = score;
                }
            }
        }
    }
}

/// Loads table block `b` (this unit's `table_fill` floats of it, element `f · units + unit`)
/// and the block's code words of this unit's slots (`block_words` per slot, slot `k · units +
/// unit`; 0 past `count`) into registers, all loads in flight at once.
#[allow(clippy::too_many_arguments)]
#[cube]
fn fetch_block(
    table: &Array<f32>,
    k_codes: &Array<u32>,
    next_table: &mut Array<f32>,
    next_words: &mut Array<u32>,
    table_base: u32,
    row: u32,
    count: u32,
    b: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let shape = geo.shape;
    let lo = b * geo.block_subspaces;
    let block_floats = shape.pq.centroids * shape.group;
    let floats = (u32::min(lo + geo.block_subspaces, shape.pq.subspaces) - lo) * block_floats;
    let base = table_base + lo * block_floats;
    #[unroll]
    for f in 0..geo.table_fill() {
        let e = f * geo.units + UNIT_POS;
        let mut x = 0.0f32;
        if e < floats {
            x = table[(base + e) as usize];
        }
        next_table[f as usize] = x;
    }
    let first_word = lo / comptime!(32 / shape.pq.nbits);
    #[unroll]
    for k in 0..comptime!(geo.chunk / geo.units) {
        let t = k * geo.units + UNIT_POS;
        #[unroll]
        for w in 0..geo.block_words() {
            let mut x = 0u32;
            if t < count && first_word + w < shape.pq.words {
                x = k_codes[((row + t) * shape.pq.words + first_word + w) as usize];
            }
            next_words[(k * geo.block_words() + w) as usize] = x;
        }
    }
}

/// Scores of a recent split into `p[g * chunk + t]`: `scale · q_g · k_t` per (slot, head), masked
/// slots [`masked_score`]. `row`: the split's first recent row.
#[allow(clippy::too_many_arguments)]
#[cube]
fn recent_scores(
    q: &Array<f32>,
    k_recent: &Array<f32>,
    p: &mut SharedMemory<f32>,
    stream: u32,
    row: u32,
    count: u32,
    scale: f32,
    visible: &Visibility,
    #[comptime] geo: DecodeGeometry,
) {
    let d = geo.shape.pq.head_dim;
    let mut pair = UNIT_POS;
    while pair < geo.shape.group * count {
        let g = pair / count;
        let t = pair % count;
        let mut score = masked_score();
        if visible.sees(t) {
            let q_base = (stream * geo.shape.group + g) * d;
            let k_base = (row + t) * d;
            let mut dot = 0.0f32;
            for c in 0..d {
                dot += q[(q_base + c) as usize] * k_recent[(k_base + c) as usize];
            }
            score = dot * scale;
        }
        p[(g * geo.chunk + t) as usize] = score;
        pair += geo.units;
    }
}

/// A coded split's value sums per part into `scratch`: unit (subspace `i`, part) walks slots
/// `part, part + parts, ...` (a batch at a time), reads each slot's value centroid of subspace
/// `i` once and adds `p_g · centroid` for every head `g`; it writes `[parts, group, head_dim]` sums, then `[parts,
/// group]` masses `Σ p`. `row`: the split's first code row; `books`: the first codebook row of
/// this KV head's value codebooks.
#[allow(clippy::too_many_arguments)]
#[cube]
fn coded_value_parts(
    v_codes: &Array<u32>,
    v_books: &Array<f32>,
    p: &SharedMemory<f32>,
    scratch: &mut SharedMemory<f32>,
    row: u32,
    count: u32,
    books: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let shape = geo.shape;
    let group = shape.group;
    let ds = shape.pq.sub_dim;
    let per_word = 32 / shape.pq.nbits;
    let mask = (1u32 << shape.pq.nbits) - 1;
    if UNIT_POS < geo.parts * shape.pq.subspaces {
        let i = UNIT_POS % shape.pq.subspaces;
        let part = UNIT_POS / shape.pq.subspaces;
        let shift = (i % per_word) * shape.pq.nbits;
        let book_base = (books + i) * shape.pq.centroids;
        let mut acc = Array::<f32>::new((group * ds) as usize);
        let mut mass = Array::<f32>::new(group as usize);
        #[unroll]
        for e in 0..group * ds {
            acc[e as usize] = 0.0;
        }
        #[unroll]
        for g in 0..group {
            mass[g as usize] = 0.0;
        }
        // Slots `batch` at a time (`part + j · parts` for `j < batch`): their codes, then their
        // centroids, load all in flight.
        let batch = comptime!(geo.value_batch());
        let mut codes = Array::<u32>::new(comptime!(batch as usize));
        let mut centroids = Array::<f32>::new(comptime!((batch * ds) as usize));
        let mut t0 = part;
        while t0 < count {
            #[unroll]
            for j in 0..batch {
                let t = t0 + j * geo.parts;
                let mut code = 0u32;
                if t < count {
                    code = (v_codes[((row + t) * shape.pq.words + i / per_word) as usize] >> shift) & mask;
                }
                codes[j as usize] = code;
            }
            #[unroll]
            for j in 0..batch {
                #[unroll]
                for s in 0..ds {
                    centroids[(j * ds + s) as usize] = v_books[((book_base + codes[j as usize]) * ds + s) as usize];
                }
            }
            #[unroll]
            for j in 0..batch {
                let t = t0 + j * geo.parts;
                if t < count {
                    #[unroll]
                    for g in 0..group {
                        let weight = p[(g * geo.chunk + t) as usize];
                        mass[g as usize] += weight;
                        #[unroll]
                        for s in 0..ds {
                            acc[(g * ds + s) as usize] += weight * centroids[(j * ds + s) as usize];
                        }
                    }
                }
            }
            t0 += batch * geo.parts;
        }
        #[unroll]
        for g in 0..group {
            #[unroll]
            for s in 0..ds {
                scratch[((part * group + g) * shape.pq.head_dim + i * ds + s) as usize] = acc[(g * ds + s) as usize];
            }
        }
        if i == 0 {
            let masses = geo.parts * group * shape.pq.head_dim;
            #[unroll]
            for g in 0..group {
                scratch[(masses + part * group + g) as usize] = mass[g as usize];
            }
        }
    }
}

/// Sums the parts' value sums and masses (written by [`coded_value_parts`]) and writes the
/// split's partial results.
#[cube]
fn sum_value_parts(
    scratch: &SharedMemory<f32>,
    head_max: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    slot_out: &SplitOut,
    #[comptime] geo: DecodeGeometry,
) {
    let group = geo.shape.group;
    let d = geo.shape.pq.head_dim;
    let mut pair = UNIT_POS;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let mut acc = 0.0f32;
        for part in 0..geo.parts {
            acc += scratch[((part * group + g) * d + c) as usize];
        }
        // A head's mass goes out once, with channel 0.
        let mut l = 0.0f32;
        if c == 0 {
            let masses = geo.parts * group * d;
            for part in 0..geo.parts {
                l += scratch[(masses + part * group + g) as usize];
            }
        }
        slot_out.write(out, out_max, out_sum, head_max, g, c, acc, l, d);
        pair += geo.units;
    }
}

/// A recent split's values: per (head, channel), `Σ p · v` over its slots, written with the
/// head's max and mass. `row`: the split's first recent row.
#[allow(clippy::too_many_arguments)]
#[cube]
fn recent_values(
    v_recent: &Array<f32>,
    p: &SharedMemory<f32>,
    head_max: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    row: u32,
    count: u32,
    slot_out: &SplitOut,
    #[comptime] geo: DecodeGeometry,
) {
    let group = geo.shape.group;
    let d = geo.shape.pq.head_dim;
    let mut pair = UNIT_POS;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let mut acc = 0.0f32;
        let mut l = 0.0f32;
        for t in 0..count {
            let weight = p[(g * geo.chunk + t) as usize];
            l += weight;
            acc += weight * v_recent[((row + t) * d + c) as usize];
        }
        slot_out.write(out, out_max, out_sum, head_max, g, c, acc, l, d);
        pair += geo.units;
    }
}
