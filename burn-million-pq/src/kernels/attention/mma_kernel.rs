//! MILLION decode attention with the values on tensor cores: the kernel a decode step runs where
//! the backend has f16 `32 × 16` by `16 × 8` warp products into f32 and asynchronous copies
//! (CUDA), the shapes allow and the tables fit the shared memory ([`MmaGeometry`]); elsewhere the
//! portable kernel ([`portable_decode_kernel`](super::portable_kernel::portable_decode_kernel)) runs
//! ([`select`](super::select) picks).
//!
//! A cube serves one stream (sequence, KV head). Its units first copy the stream's f16 lookup
//! table and the value codebooks ([`half_table`](super::half_table)) into shared memory, then
//! each warp attends on its own split of the slots (coded, then the recent window), in rounds of
//! 32 slots, one slot per lane, with the next round's code words loading into registers:
//! 1. scores: a coded slot adds `T[s, code_s]` over its subspaces, one load of every query
//!    head's entry per code (two heads per 32-bit word, the words side by side), in f16 over the
//!    subspaces of one code word, then in f32; lane `l` walks its words from word
//!    [`key_word_turn`], so that a half warp's 16 lanes look up 16 distinct words, whose entries
//!    the table's layout puts on distinct pairs of banks for every code. A recent slot scores
//!    `scale · q · k` in f32;
//! 2. the warp's online softmax ([`weigh_round`]) turns the scores into f16 weights;
//! 3. values, per half round of 16 slots and block of 32 channels: lanes `(t, h)` rebuild slot
//!    `t`'s half `h` of the block's channels into the warp's f16 tile (a coded slot from the
//!    staged codebooks, by a bank-spreading walk; a recent slot from its f32 row), and the warp
//!    adds `Ṽᵀ Pᵀ` on tensor cores ([`add_values`]). A tile of 32 channels rather than the whole
//!    head leaves room in the shared memory for more warps (12 rather than 5 at 64 subspaces of
//!    8 bits, head dim 128, GQA 4; the twelfth because the recent window's scores read the
//!    queries from global memory instead of a staged copy: 5% shorter steps at 32K batch 8 on an
//!    H100); its lookups, on the block's 16 subspaces (2 channels each), fall two lanes to a bank.
//!
//! The warp writes its split's partials for the log-sum-exp merge.
//!
//! Precision, beyond the portable kernel's: a table entry rounded to f16 and the f16 sums of a code
//! word's `p` entries move a score by at most `p · 2^-11 · Σ_s |T_s|` (to first order), and the
//! f16 rounding of the value codebooks, of the recent values and of the weights moves the output
//! by at most `2 · 2^-11 · max |v|`.

use burn_kvcompress::kernels::{
    decode_slot_visible,
    warp_mma::{
        add_values, clear_weights, value_sums, warp_softmax, weigh_round, write_warp_partials, CHANNEL_BLOCK,
        MMA_DEPTH, MMA_HEADS, SCRATCH_LD, WARP,
    },
    SplitOut,
};
use cubecl::prelude::{
    barrier::{copy_async, Barrier},
    *,
};

use super::{
    half_table::{key_entry, word_base, PLANE_COLUMNS},
    mma_geometry::{MmaGeometry, WORD_ELEMENTS},
};

/// Where a warp's slots lie: `count` from slot `first` of `len`, `coded` of them codes, for a
/// sequence whose first real slot is `start`, under a window of `window` slots (0: none).
#[derive(CubeType)]
struct WarpSlots {
    first: u32,
    count: u32,
    len: u32,
    coded: u32,
    start: u32,
    window: u32,
}

/// The cube's stream and the rows of its codes and recent slots.
#[derive(CubeType)]
struct StreamRows {
    code_row0: u32,
    recent_row0: u32,
}

/// One cube of MILLION decode attention on tensor cores; see the module documentation.
///
/// - `table`: `[streams, table_words]`, `books`: `[groups, book_words]` (f16 pairs,
///   [`half_table`](super::half_table));
/// - `k_codes`, `v_codes`: `[streams, coded, words]`; `k_recent`, `v_recent`: `[streams, len −
///   coded, head_dim]`; `q`: `[streams · group, head_dim]`; `key_start`: `[batch]`;
/// - outputs per (query head, split = cube · warps + warp): `out` (`head_dim` each), `out_max`,
///   `out_sum`;
/// - cube `(x, stream)`: warp `w` takes slots `(x · warps + w) · warp_chunk ..` (at most
///   `warp_chunk`, a multiple of 32).
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn mma_decode_kernel<E: Float, N: Size, T: Size>(
    table: &Array<Vector<E, T>>,
    books: &Array<Vector<E, N>>,
    k_codes: &Array<u32>,
    v_codes: &Array<u32>,
    q: &Array<f32>,
    k_recent: &Array<f32>,
    v_recent: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    coded: u32,
    warp_chunk: u32,
    window: u32,
    scale: f32,
    per_head_books: u32,
    #[comptime] geo: MmaGeometry,
) {
    let shape = geo.tables.shape;
    let stream = CUBE_POS_Y;
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let split = CUBE_POS_X * geo.warps + UNIT_POS / WARP;
    let first = u32::min(split * warp_chunk, len);
    let slots = WarpSlots {
        first,
        count: u32::min(warp_chunk, len - first),
        len,
        coded,
        start: key_start[(stream / kv_heads) as usize],
        window,
    };
    let rows = StreamRows { code_row0: stream * coded, recent_row0: stream * (len - coded) };
    let target = SplitOut { first_head: stream * shape.group, split, splits: CUBE_COUNT_X * geo.warps };

    let mut lookup = SharedMemory::<Vector<E, T>>::new_aligned(geo.tables.table_entries() as usize, 16usize);
    let mut value_books = SharedMemory::<Vector<E, N>>::new_aligned(geo.tables.book_words() as usize, 16usize);
    let mut tiles =
        SharedMemory::<Vector<E, N>>::new_aligned(comptime!((geo.warps * geo.tile_words()) as usize), 32usize);
    let mut weights = SharedMemory::<E>::new_aligned(comptime!((geo.warps * MMA_HEADS * WARP) as usize), 32usize);
    let mut scratch =
        SharedMemory::<f32>::new_aligned(comptime!((geo.warps * MMA_HEADS * SCRATCH_LD) as usize), 32usize);

    // Initializing the barrier synchronizes the cube.
    let copies = Barrier::shared(geo.units(), UNIT_POS == 0);
    let book_base = (stream % kv_heads) * per_head_books * geo.tables.book_words();
    let entries = comptime!(geo.tables.table_entries());
    stage(table, &mut lookup, stream * entries, entries, geo.units(), geo.tables.table_entry_elements());
    stage(books, &mut value_books, book_base, geo.tables.book_words(), geo.units(), WORD_ELEMENTS);
    copies.commit_copy_async();
    clear_weights(&mut weights);
    copies.arrive_and_wait();
    sync_cube();

    let mut softmax = warp_softmax(shape.group);
    let sums = value_sums(shape.pq.head_dim);
    let words = comptime!(shape.pq.words);
    let mut next_keys = Array::<u32>::new(words as usize);
    let mut next_values = Array::<u32>::new(words as usize);
    let mut key_words = Array::<u32>::new(words as usize);
    let mut value_words = Array::<u32>::new(words as usize);
    load_codes(k_codes, v_codes, &mut next_keys, &mut next_values, &rows, &slots, 0u32, geo);
    let lane = UNIT_POS % WARP;
    let rounds = slots.count.div_ceil(WARP);
    for round in 0..rounds {
        #[unroll]
        for w in 0..words {
            key_words[w as usize] = next_keys[w as usize];
            value_words[w as usize] = next_values[w as usize];
        }
        if round + 1 < rounds {
            load_codes(k_codes, v_codes, &mut next_keys, &mut next_values, &rows, &slots, round + 1, geo);
        }
        let t = slots.first + round * WARP + lane;
        let in_split = t < slots.first + slots.count;
        let mut s = Array::<f32>::new(shape.group as usize);
        if t < slots.coded {
            lookup_scores(&lookup, &key_words, &mut s, geo);
        } else {
            let query_row0 = stream * shape.group;
            recent_scores(q, k_recent, &mut s, query_row0, rows.recent_row0 + t - slots.coded, in_split, scale, geo);
        }
        let visible = in_split && decode_slot_visible(t, slots.len, slots.start, slots.window);
        weigh_round(
            &s,
            visible,
            &mut softmax,
            &sums,
            &mut scratch,
            &mut weights,
            shape.pq.head_dim,
            shape.group,
            shape.pq.head_dim,
            true,
        );
        let tile = (UNIT_POS / WARP) * geo.tile_words();
        let blocks = comptime!(geo.tile_channels() / CHANNEL_BLOCK);
        #[unroll]
        for half in 0..comptime!(WARP / MMA_DEPTH) {
            let tv = slots.first + round * WARP + half * MMA_DEPTH + lane % MMA_DEPTH;
            let row_at = tile + (lane % MMA_DEPTH) * comptime!(geo.tile_stride() / WORD_ELEMENTS);
            #[unroll]
            for part in 0..geo.channel_parts() {
                if tv < slots.coded {
                    rebuild_coded_values(&value_books, &value_words, &mut tiles, row_at, half, part, geo);
                } else {
                    let row = rows.recent_row0 + tv - slots.coded;
                    let valid = tv < slots.first + slots.count;
                    rebuild_recent_values(v_recent, &mut tiles, row_at, row, valid, part, geo);
                }
                sync_plane();
                add_values(
                    &tiles,
                    tile * WORD_ELEMENTS,
                    geo.tile_stride(),
                    &weights,
                    half,
                    &sums,
                    shape.pq.head_dim,
                    WORD_ELEMENTS,
                    1u32,
                    part * blocks,
                    blocks,
                );
                sync_plane();
            }
        }
    }
    write_warp_partials(
        &sums,
        &mut scratch,
        &softmax,
        shape.pq.head_dim,
        &target,
        out,
        out_max,
        out_sum,
        shape.group,
        shape.pq.head_dim,
    );
}

/// Issues the calling unit's asynchronous copies of vectors `base ..` (`count` of them, of
/// `elements` f16 each) of `src` into `dst`, one vector of every `units`.
#[cube]
fn stage<E: Float, V: Size>(
    src: &Array<Vector<E, V>>,
    dst: &mut SharedMemory<Vector<E, V>>,
    base: u32,
    #[comptime] count: u32,
    #[comptime] units: u32,
    #[comptime] elements: u32,
) {
    let mut i = UNIT_POS;
    while i < count {
        let from = (base + i) as usize;
        copy_async(&src.slice(from, from + 1), &mut dst.slice_mut(i as usize, i as usize + 1), elements);
        i += units;
    }
}

/// Loads round `round`'s code words of the calling lane into registers (0 for slots past the
/// split or past the codes): its slot's key words, word `j` of `keys` being word `(j +
/// key_word_turn(lane, words)) % words` of the slot (the walk of the score lookups), and for
/// each half round and channel part the value words of slot `t = lane % 16` of the half, half
/// `lane / 16` of the part's words, word `j` of that half being its word `(j +
/// value_word_turn(t)) % n` (`n` words; the walk of the value rebuild).
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_codes(
    k_codes: &Array<u32>,
    v_codes: &Array<u32>,
    keys: &mut Array<u32>,
    values: &mut Array<u32>,
    rows: &StreamRows,
    slots: &WarpSlots,
    round: u32,
    #[comptime] geo: MmaGeometry,
) {
    let words = comptime!(geo.tables.shape.pq.words);
    let lane = UNIT_POS % WARP;
    let end = u32::min(slots.first + slots.count, slots.coded);
    let t = slots.first + round * WARP + lane;
    #[unroll]
    for j in 0..words {
        let mut x = 0u32;
        if t < end {
            x = k_codes[((rows.code_row0 + t) * words + (j + key_word_turn(lane, words)) % words) as usize];
        }
        keys[j as usize] = x;
    }
    let (slot, side) = (lane % MMA_DEPTH, lane / MMA_DEPTH);
    let side_words = comptime!(geo.part_words() / 2);
    #[unroll]
    for half in 0..comptime!(WARP / MMA_DEPTH) {
        let tv = slots.first + round * WARP + half * MMA_DEPTH + slot;
        #[unroll]
        for part in 0..geo.channel_parts() {
            #[unroll]
            for j in 0..side_words {
                let mut x = 0u32;
                if tv < end {
                    let turn = value_word_turn(slot, side_words);
                    let w = part * geo.part_words() + side * side_words + (j + turn) % side_words;
                    x = v_codes[((rows.code_row0 + tv) * words + w) as usize];
                }
                values[((half * geo.channel_parts() + part) * side_words + j) as usize] = x;
            }
        }
    }
}

/// A coded slot's scores `s[g] = Σ_s T[s, code_s]` from the staged table (one entry of every
/// query head per lookup, two heads per word), added in f16 over a code word's subspaces, then in
/// f32. The lane holds its words from word [`key_word_turn`] on (so loaded); code `i` of word `w`
/// with centroid `c` is entry [`key_entry`] of the table.
#[cube]
fn lookup_scores<E: Float, T: Size>(
    lookup: &SharedMemory<Vector<E, T>>,
    key_words: &Array<u32>,
    s: &mut Array<f32>,
    #[comptime] geo: MmaGeometry,
) {
    let shape = geo.tables.shape;
    let (words, per_word) = (shape.pq.words, geo.per_word());
    let exact = comptime!(words * per_word == shape.pq.subspaces);
    let mask = comptime!((1u32 << shape.pq.nbits) - 1);
    let turn = key_word_turn(UNIT_POS % WARP, words);
    // Sums start at −0: `−0 + x = x` for every `x`, so the compiler drops the first addition. From
    // +0 it may not (`+0 + −0 = +0` is not `−0`).
    #[unroll]
    for g in 0..shape.group {
        s[g as usize] = -0.0;
    }
    #[unroll]
    for j in 0..words {
        let w = (j + turn) % words;
        let word = key_words[j as usize];
        // A word's first code is always a subspace's (`words = ⌈subspaces / per_word⌉`); the f16
        // sum starts from its entry.
        let mut acc = lookup[key_entry(w, word & mask, 0u32, geo.tables) as usize];
        #[unroll]
        for i in 1..per_word {
            if exact || w * per_word + i < shape.pq.subspaces {
                let c = (word >> (i * shape.pq.nbits)) & mask;
                acc += lookup[key_entry(w, c, i, geo.tables) as usize];
            }
        }
        #[unroll]
        for g in 0..shape.group {
            s[g as usize] += f32::cast_from(acc[g as usize]);
        }
    }
}

/// Where the key walk of lane `lane` starts among its slot's `words` code words: `lane % words`.
/// With 16 words (or a multiple) a half warp's 16 lanes then hold 16 distinct words at every
/// step, whose entries the table's layout puts on distinct pairs of banks.
#[cube]
fn key_word_turn(lane: u32, #[comptime] words: u32) -> u32 {
    lane % words
}

/// `word` with its codes rotated so that its code `i` is code `(i + first_code) % codes` of the
/// original: the codes' shifts stay compile-time constants.
#[cube]
fn rotate_codes(word: u32, first_code: u32, #[comptime] nbits: u32) -> u32 {
    let bits = first_code * nbits;
    (word >> bits) | (word << ((32 - bits) % 32))
}

/// A recent slot's scores `s[g] = scale · q_g · k` from its f32 row `row` and the group's query
/// rows `query_row0 ..` of `q` (0 when `valid` is false: a lane past the split).
#[allow(clippy::too_many_arguments)]
#[cube]
fn recent_scores(
    q: &Array<f32>,
    k_recent: &Array<f32>,
    s: &mut Array<f32>,
    query_row0: u32,
    row: u32,
    valid: bool,
    scale: f32,
    #[comptime] geo: MmaGeometry,
) {
    let shape = geo.tables.shape;
    let d = shape.pq.head_dim;
    #[unroll]
    for g in 0..shape.group {
        s[g as usize] = 0.0;
    }
    if valid {
        for c in 0..d {
            let k = k_recent[(row * d + c) as usize];
            #[unroll]
            for g in 0..shape.group {
                s[g as usize] += q[((query_row0 + g) * d + c) as usize] * k;
            }
        }
        #[unroll]
        for g in 0..shape.group {
            s[g as usize] *= scale;
        }
    }
}

/// Rebuilds channel part `part` of the lane's coded slot of half round `half` (its half `lane /
/// 16` of the part's code words) into its tile row at word `row_at`, from the staged value
/// codebooks: the lanes of a slot walk their words from word [`value_word_turn`] (as loaded) and
/// a word's codes from code [`value_code_turn`], so that the warp's 32 lookups fall on as many
/// distinct subspaces of a row, hence banks, as the part has (up to 32), and its 32 stores into
/// the tile on distinct banks where a part's codes are 4 words of 4 per side pair and tile rows
/// 20 words apart (64 subspaces of 8 bits, head dim 128: the unit test below).
#[cube]
fn rebuild_coded_values<E: Float, N: Size>(
    value_books: &SharedMemory<Vector<E, N>>,
    value_words: &Array<u32>,
    tiles: &mut SharedMemory<Vector<E, N>>,
    row_at: u32,
    #[comptime] half: u32,
    #[comptime] part: u32,
    #[comptime] geo: MmaGeometry,
) {
    let shape = geo.tables.shape;
    let side_words = comptime!(geo.part_words() / 2);
    let per_word = comptime!(geo.per_word());
    let exact = comptime!(shape.pq.words * per_word == shape.pq.subspaces);
    let pairs = comptime!(shape.pq.sub_dim / 2);
    let first_subspace = comptime!(part * geo.part_words() * per_word);
    let mask = comptime!((1u32 << shape.pq.nbits) - 1);
    let lane = UNIT_POS % WARP;
    let (slot, side) = (lane % MMA_DEPTH, lane / MMA_DEPTH);
    let first_code = value_code_turn(slot, per_word);
    let turn = value_word_turn(slot, side_words);
    #[unroll]
    for j in 0..side_words {
        let w = part * geo.part_words() + side * side_words + (j + turn) % side_words;
        let base = word_base(w, per_word, geo.tables);
        let loaded = value_words[((half * geo.channel_parts() + part) * side_words + j) as usize];
        let word = rotate_codes(loaded, first_code, shape.pq.nbits);
        #[unroll]
        for i in 0..per_word {
            let code_index = (i + first_code) % per_word;
            let subspace = w * per_word + code_index;
            if exact || subspace < shape.pq.subspaces {
                let at = (base + code_index) + ((word >> (i * shape.pq.nbits)) & mask) * PLANE_COLUMNS;
                #[unroll]
                for p in 0..pairs {
                    tiles[(row_at + (subspace - first_subspace) * pairs + p) as usize] =
                        value_books[(p * geo.tables.plane_words() + at) as usize];
                }
            }
        }
    }
}

/// Where the value walk of slot `slot` (of a half round) starts among its side's `side_words`
/// code words: `(slot / 2) % side_words`.
#[cube]
fn value_word_turn(slot: u32, #[comptime] side_words: u32) -> u32 {
    (slot / 2) % side_words
}

/// Where the value walk of slot `slot` starts among a code word's `per_word` codes: `(slot % 2 +
/// 2 · (slot / 8)) % per_word`. With [`value_word_turn`], slots `t` and `t + 8`, whose tile rows
/// share their banks, start on other codes, and the 16 slots of a side take each (word, code)
/// start twice.
#[cube]
fn value_code_turn(slot: u32, #[comptime] per_word: u32) -> u32 {
    (slot % 2 + 2 * (slot / 8)) % per_word
}

/// Writes half `lane / 16` of channel part `part` of recent row `row` (f32, rounded to f16) into
/// the lane's tile row at word `row_at`; zeros past the head's channels and where `valid` is
/// false (a lane past the split: its weight is 0, and the tile must hold finite values).
#[cube]
fn rebuild_recent_values<E: Float, N: Size>(
    v_recent: &Array<f32>,
    tiles: &mut SharedMemory<Vector<E, N>>,
    row_at: u32,
    row: u32,
    valid: bool,
    #[comptime] part: u32,
    #[comptime] geo: MmaGeometry,
) {
    let d = geo.tables.shape.pq.head_dim;
    let side_pairs = comptime!(geo.tile_channels() / 4);
    let side = (UNIT_POS % WARP) / MMA_DEPTH;
    #[unroll]
    for x in 0..side_pairs {
        let pair = side * side_pairs + x;
        let channel = part * geo.tile_channels() + 2 * pair;
        let mut word = Vector::<E, N>::new(E::cast_from(0.0f32));
        if valid && channel < d {
            word[0] = E::cast_from(v_recent[(row * d + channel) as usize]);
            word[1] = E::cast_from(v_recent[(row * d + channel + 1) as usize]);
        }
        tiles[(row_at + pair) as usize] = word;
    }
}

#[cfg(test)]
mod tests {
    use super::{
        super::half_table::tests::{benchmark_tables, lanes_per_bank},
        *,
    };

    #[test]
    fn the_value_walk_spreads_lookups_and_tile_stores_over_the_banks() {
        let geo = MmaGeometry { tables: benchmark_tables(), warps: 12 };
        let (part_words, per_word, side_words) = (geo.part_words(), geo.per_word(), geo.part_words() / 2);
        let row_words = geo.tile_stride() / WORD_ELEMENTS;
        // Lane `l` = (slot `t = l % 16`, side `h = l / 16`) reads, at step `(j, i)`, word `h ·
        // side_words + (j + turn) % side_words` of the part and code `(i + first) % per_word` of
        // it, and stores the centroid at word `t · row_words + subspace` of the tile.
        let subspace = |part: u32, j: u32, i: u32, l: u32| {
            let (t, h) = (l % 16, l / 16);
            let (turn, first) = (value_word_turn(t, side_words), value_code_turn(t, per_word));
            let w = part * part_words + h * side_words + (j + turn) % side_words;
            w * per_word + (i + first) % per_word
        };
        for part in 0..geo.channel_parts() {
            for j in 0..side_words {
                for i in 0..per_word {
                    // The part's 16 subspaces on 16 banks, two lanes each.
                    let lanes = lanes_per_bank(|l| subspace(part, j, i, l));
                    assert_eq!(lanes, 2, "lookups: part {part}, word {j}, code {i}");
                    let mut banks = [0u32; 32];
                    for l in 0..32 {
                        let first = part * part_words * per_word;
                        banks[(((l % 16) * row_words + subspace(part, j, i, l) - first) % 32) as usize] += 1;
                    }
                    assert_eq!(banks, [1; 32], "stores: part {part}, word {j}, code {i}");
                }
            }
        }
        // Each slot's two lanes rebuild every subspace of a part once.
        for part in 0..geo.channel_parts() {
            for t in 0..16 {
                let mut seen: Vec<u32> = (0..2)
                    .flat_map(|h| (0..side_words).flat_map(move |j| (0..per_word).map(move |i| (j, i, h))))
                    .map(|(j, i, h)| subspace(part, j, i, t + 16 * h))
                    .collect();
                seen.sort_unstable();
                let first = part * part_words * per_word;
                assert_eq!(seen, (first..first + part_words * per_word).collect::<Vec<_>>(), "slot {t}");
            }
        }
    }

    #[test]
    fn the_key_walk_spreads_over_the_banks() {
        // 64 subspaces of 8 bits, 16 words per slot: lane `l` reads word `(j + key_word_turn(l)) %
        // 16` of its slot at step `j`, and its code `i`, with an arbitrary centroid.
        let tables = benchmark_tables();
        let words = tables.shape.pq.words;
        for j in 0..words {
            for i in 0..tables.per_word() {
                // Entries of two words (two pairs of query heads, one 8-byte load): a half warp's
                // 16 lanes on 16 distinct pairs of banks.
                for half in 0..2 {
                    let mut pairs = [0u32; 16];
                    for l in 16 * half..16 * (half + 1) {
                        let w = (j + key_word_turn(l, words)) % words;
                        pairs[(key_entry(w, (l * 37 + 11) % 256, i, tables) % 16) as usize] += 1;
                    }
                    assert_eq!(pairs, [1; 16], "8-byte keys: word {j}, code {i}, half warp {half}");
                }
            }
        }
        // Each lane visits every word once.
        for l in 0..32 {
            let mut seen: Vec<u32> = (0..words).map(|j| (j + key_word_turn(l, words)) % words).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..words).collect::<Vec<_>>());
        }
    }
}
