//! The portable PQ decode attention kernel (one query slot per sequence), flash-decoding style.
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
//! 2. per head, the split's max score `m`, `p = exp(s - m)` ([`split_softmax`]) and the mass
//!    `l = Σ p` ([`split_masses`]);
//! 3. values. A coded split walks the subspaces in blocks too: the block's value codebooks are
//!    staged in shared memory, one unit per (subspace of the block, part of the slots) reads each
//!    of its slots' codes and adds `p · centroid` for all heads from the staged codebook, and the
//!    parts' sums are added up in shared memory (the next block's codebooks load into registers
//!    meanwhile). A recent split sums `p · v` per (head, channel);
//! 4. the unnormalized output, `m` and `l` go to the log-sum-exp merge
//!    (`burn_kvcompress::kernels::merge_partials`).

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_masses, split_softmax, SplitOut};
use cubecl::prelude::*;

use super::portable_geometry::PortableGeometry;

/// One split of PQ decode attention; see the module documentation.
///
/// - `table`: `[batch, kv_heads, subspaces, group, centroids]`;
/// - `k_codes`, `v_codes`: `[batch, kv_heads, coded, words]`; `v_books`: `[groups, subspaces,
///   centroids, sub_dim]`; `k_recent`, `v_recent`: `[batch, kv_heads, len - coded, head_dim]`;
/// - `q`: `[batch, kv_heads * group, head_dim]`; `key_start`: `[batch]`;
/// - outputs per (query head, split): `out` (`head_dim` each), `out_max`, `out_sum`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn portable_decode_kernel(
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
    #[comptime] geo: PortableGeometry,
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
    let mut scratch = SharedMemory::<f32>::new(geo.scratch_floats as usize);
    let mut head_max = SharedMemory::<f32>::new(group as usize);
    let mut head_sum = SharedMemory::<f32>::new(group as usize);

    let table_base = stream * geo.shape.table_floats();
    coded_scores(table, k_codes, &mut p, &mut scratch, table_base, row, count, is_coded, &visible, geo);
    if !is_coded {
        recent_scores(q, k_recent, &mut p, stream, row, count, scale, &visible, geo);
    }
    sync_cube();
    split_softmax(&mut p, &mut head_max, count, group, chunk);
    split_masses(&p, &mut head_sum, count, group, chunk);

    let head = stream * group;
    let slot_out = SplitOut { first_head: head, split, splits: CUBE_COUNT_X };
    let books = (stream % kv_heads) * per_head_books * geo.shape.pq.subspaces;
    coded_values(
        v_codes,
        v_books,
        &p,
        &mut scratch,
        &head_max,
        &head_sum,
        out,
        out_max,
        out_sum,
        row,
        count,
        books,
        is_coded,
        &slot_out,
        geo,
    );
    if !is_coded {
        recent_values(v_recent, &p, &head_max, &head_sum, out, out_max, out_sum, row, count, &slot_out, geo);
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

/// Writes channel `c` of head `g`'s unnormalized output `value` as `slot_out`'s split; channel 0
/// also writes the head's max and its mass `Σ p`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_channel(
    slot_out: &SplitOut,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    head_max: &SharedMemory<f32>,
    head_sum: &SharedMemory<f32>,
    g: u32,
    c: u32,
    value: f32,
    #[comptime] head_dim: u32,
) {
    slot_out.write_output(out, g, c, value, head_dim);
    if c == 0 {
        slot_out.write_stats(out_max, out_sum, g, head_max[g as usize], head_sum[g as usize]);
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
    #[comptime] geo: PortableGeometry,
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
            stage(&next_table, scratch, floats, geo.table_fill(), geo.units, shape.pq.centroids, 1u32);
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
                        let at = ii * group * shape.pq.centroids + code;
                        #[unroll]
                        for g in 0..group {
                            scores[(k * group + g) as usize] += scratch[(at + g * shape.pq.centroids) as usize];
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
    #[comptime] geo: PortableGeometry,
) {
    let shape = geo.shape;
    let lo = b * geo.block_subspaces;
    let block_floats = shape.pq.centroids * shape.group;
    let floats = (u32::min(lo + geo.block_subspaces, shape.pq.subspaces) - lo) * block_floats;
    prefetch(table, table_base + lo * block_floats, floats, next_table, geo.table_fill(), geo.units);
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
    #[comptime] geo: PortableGeometry,
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

/// Loads this unit's `fill` of `floats` floats from `src[base..]` into `held` (element `f · units
/// + unit` into `held[f]`; 0 past `floats`), all loads in flight at once.
#[cube]
fn prefetch(
    src: &Array<f32>,
    base: u32,
    floats: u32,
    held: &mut Array<f32>,
    #[comptime] fill: u32,
    #[comptime] units: u32,
) {
    #[unroll]
    for f in 0..fill {
        let e = f * units + UNIT_POS;
        let mut x = 0.0f32;
        if e < floats {
            x = src[(base + e) as usize];
        }
        held[f as usize] = x;
    }
}

/// Stores what [`prefetch`] loaded into `scratch[0..floats]`, each `[outer, inner]` matrix of it
/// transposed to `[inner, outer]` (`inner` 1: as loaded).
#[cube]
fn stage(
    held: &Array<f32>,
    scratch: &mut SharedMemory<f32>,
    floats: u32,
    #[comptime] fill: u32,
    #[comptime] units: u32,
    #[comptime] outer: u32,
    #[comptime] inner: u32,
) {
    #[unroll]
    for f in 0..fill {
        let e = f * units + UNIT_POS;
        if e < floats {
            let matrix = e / (outer * inner);
            let o = (e / inner) % outer;
            let n = e % inner;
            scratch[((matrix * inner + n) * outer + o) as usize] = held[f as usize];
        }
    }
}

/// A coded split's values, written as its partial results: subspace block by block, the block's
/// value codebooks are staged in `scratch` as `[subspace, sub_dim, centroid]` (lanes gathering
/// random codes spread over the banks; the next block's loading into registers meanwhile), unit
/// (span of `value_span` subspaces of the block, part) walks slots `part, part + value_parts, ...`
/// (a batch of codes in flight) adding `p_g · C_V^i[code_i]` for every head `g` and subspace `i`
/// of its span, and the parts' sums are added up in `scratch` ([`sum_parts`]). Every unit of the cube calls it (it synchronizes), and only a coded split reads or
/// writes. `row`: the split's first code row; `books`: the first codebook row of this KV head's
/// value codebooks.
#[allow(clippy::too_many_arguments)]
#[cube]
fn coded_values(
    v_codes: &Array<u32>,
    v_books: &Array<f32>,
    p: &SharedMemory<f32>,
    scratch: &mut SharedMemory<f32>,
    head_max: &SharedMemory<f32>,
    head_sum: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    row: u32,
    count: u32,
    books: u32,
    is_coded: bool,
    slot_out: &SplitOut,
    #[comptime] geo: PortableGeometry,
) {
    let shape = geo.shape;
    let group = shape.group;
    let ds = shape.pq.sub_dim;
    let centroids = shape.pq.centroids;
    let block = geo.value_subspaces;
    let span = geo.value_span;
    let parts = geo.value_parts;
    let per_word = comptime!(32 / shape.pq.nbits);
    // A span lies within one code word when spans tile the words.
    let one_word = comptime!(per_word % span == 0);
    let mask = (1u32 << shape.pq.nbits) - 1;
    let blocks = comptime!(shape.pq.subspaces.div_ceil(block));
    let fill = comptime!(geo.value_fill());
    let batch = comptime!(geo.value_batch());
    let sums = comptime!(group * block * ds);
    let spans = comptime!(block / span);
    let first_local = (UNIT_POS % spans) * span;
    let part = UNIT_POS / spans;
    let mut next_books = Array::<f32>::new(comptime!(fill as usize));
    let mut acc = Array::<f32>::new(comptime!((span * group * ds) as usize));
    let mut codes = Array::<u32>::new(comptime!((batch * span) as usize));
    if is_coded {
        let floats = u32::min(block, shape.pq.subspaces) * geo.book_floats();
        prefetch(v_books, books * geo.book_floats(), floats, &mut next_books, fill, geo.units);
    }
    for b in 0..blocks {
        let lo = b * block;
        let in_block = u32::min(block, shape.pq.subspaces - lo);
        sync_cube();
        if is_coded {
            stage(&next_books, scratch, in_block * geo.book_floats(), fill, geo.units, centroids, ds);
        }
        sync_cube();
        #[unroll]
        for e in 0..span * group * ds {
            acc[e as usize] = 0.0;
        }
        if is_coded {
            if b + 1 < blocks {
                let next = lo + block;
                let floats = u32::min(block, shape.pq.subspaces - next) * geo.book_floats();
                prefetch(v_books, (books + next) * geo.book_floats(), floats, &mut next_books, fill, geo.units);
            }
            if part < parts && first_local < in_block {
                let first = lo + first_local;
                let mut t0 = part;
                while t0 < count {
                    #[unroll]
                    for j in 0..batch {
                        let t = t0 + j * parts;
                        let code_row = (row + t) * shape.pq.words;
                        let mut word = 0u32;
                        if one_word && t < count {
                            word = v_codes[(code_row + first / per_word) as usize];
                        }
                        #[unroll]
                        for k in 0..span {
                            let i = first + k;
                            if !one_word && t < count && i < shape.pq.subspaces {
                                word = v_codes[(code_row + i / per_word) as usize];
                            }
                            codes[(j * span + k) as usize] = (word >> ((i % per_word) * shape.pq.nbits)) & mask;
                        }
                    }
                    #[unroll]
                    for j in 0..batch {
                        let t = t0 + j * parts;
                        if t < count {
                            #[unroll]
                            for g in 0..group {
                                let weight = p[(g * geo.chunk + t) as usize];
                                #[unroll]
                                for k in 0..span {
                                    let centroid =
                                        (first_local + k) * geo.book_floats() + codes[(j * span + k) as usize];
                                    #[unroll]
                                    for s in 0..ds {
                                        let x = scratch[(centroid + s * centroids) as usize];
                                        acc[((k * group + g) * ds + s) as usize] += weight * x;
                                    }
                                }
                            }
                        }
                    }
                    t0 += batch * parts;
                }
            }
        }
        sync_cube();
        // The parts' sums, `[part, group, block, sub_dim]`: a summing unit reads consecutive
        // floats of each part.
        if is_coded && part < parts {
            #[unroll]
            for k in 0..span {
                #[unroll]
                for g in 0..group {
                    #[unroll]
                    for s in 0..ds {
                        let at = part * sums + (g * block + first_local + k) * ds + s;
                        scratch[at as usize] = acc[((k * group + g) * ds + s) as usize];
                    }
                }
            }
        }
        sync_cube();
        sum_parts(scratch, head_max, head_sum, out, out_max, out_sum, lo, in_block, is_coded, slot_out, geo);
    }
}

/// Adds up the value parts' sums of a block (`scratch[part * sums + e]`, `e` = (head, channel of
/// the block)) and writes them as channels `lo · sub_dim ..` of the split's partial results: first
/// `units / sums` units per `e` each add a share of the parts (written back over the first parts'
/// rows), then one unit per `e` adds the shares. Every unit of the cube calls it (it
/// synchronizes).
#[allow(clippy::too_many_arguments)]
#[cube]
fn sum_parts(
    scratch: &mut SharedMemory<f32>,
    head_max: &SharedMemory<f32>,
    head_sum: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    lo: u32,
    in_block: u32,
    is_coded: bool,
    slot_out: &SplitOut,
    #[comptime] geo: PortableGeometry,
) {
    let ds = geo.shape.pq.sub_dim;
    let block = geo.value_subspaces;
    let parts = geo.value_parts;
    let sums = comptime!(geo.shape.group * block * ds);
    let sharers = comptime!((geo.units / sums).clamp(1, parts));
    let share = comptime!(parts.div_ceil(sharers));
    let e = UNIT_POS % sums;
    let sharer = UNIT_POS / sums;
    let mut partial = 0.0f32;
    if is_coded && sharer < sharers {
        for q in sharer * share..u32::min(sharer * share + share, parts) {
            partial += scratch[(q * sums + e) as usize];
        }
    }
    sync_cube();
    if is_coded && sharer < sharers {
        scratch[(sharer * sums + e) as usize] = partial;
    }
    sync_cube();
    if is_coded {
        let mut e = UNIT_POS;
        while e < sums {
            let g = e / (block * ds);
            let local_channel = e % (block * ds);
            if local_channel < in_block * ds {
                let mut value = 0.0f32;
                for q in 0..sharers {
                    value += scratch[(q * sums + e) as usize];
                }
                write_channel(
                    slot_out,
                    out,
                    out_max,
                    out_sum,
                    head_max,
                    head_sum,
                    g,
                    lo * ds + local_channel,
                    value,
                    geo.shape.pq.head_dim,
                );
            }
            e += geo.units;
        }
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
    head_sum: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    row: u32,
    count: u32,
    slot_out: &SplitOut,
    #[comptime] geo: PortableGeometry,
) {
    let group = geo.shape.group;
    let d = geo.shape.pq.head_dim;
    let mut pair = UNIT_POS;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let mut acc = 0.0f32;
        for t in 0..count {
            acc += p[(g * geo.chunk + t) as usize] * v_recent[((row + t) * d + c) as usize];
        }
        write_channel(slot_out, out, out_max, out_sum, head_max, head_sum, g, c, acc, d);
        pair += geo.units;
    }
}
