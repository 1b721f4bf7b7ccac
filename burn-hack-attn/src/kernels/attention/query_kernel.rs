//! Quantizing a decode step's queries to 8 bits, once per (sequence, KV head), before the scalar
//! decode kernel: each of its chunks of the same sequence and KV head reads the codes and their
//! metadata instead of quantizing the group's queries again (which, at 32K slots, 128 chunks per
//! sequence would each have done). The tensor-core kernel, a few cubes per stream, quantizes its
//! stream's queries itself into shared memory ([`stream_queries`]), which saves a launch.
//!
//! Output layout, per stream `batch row · kv_heads + kv head`:
//! - `q_codes[stream · pairs · head_dim + pair · head_dim + c]`: the codes of heads `2 · pair` and
//!   `2 · pair + 1` at channel `c`, in the low and high 16 bits (0 for a missing odd head);
//! - `q_meta[stream · 3 · runs + run]`, `+ runs`, `+ 2 · runs`: each (head, key group) run's min,
//!   scale and code sum, run `g · parts + part`.

use burn_kvcompress::kernels::{min_max_runs, sum_runs};
use cubecl::prelude::*;

use crate::kernels::eight_bit::{code8, scale8};

/// A stream's 8-bit query codes and their runs' metadata in shared memory, in the layout of the
/// global outputs without the stream offset: `codes[pair · head_dim + c]`, `meta[run]`, `[runs +
/// run]`, `[2 · runs + run]`.
#[derive(CubeType)]
pub struct StreamQueries {
    pub codes: SharedMemory<u32>,
    pub meta: SharedMemory<f32>,
}

/// The queries of one group, shapes fixed at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryShape {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Channels per key group (a run of a head's codes).
    pub key_group: u32,
}

impl QueryShape {
    /// Pairs of heads (one word of codes per pair and channel).
    pub fn pairs(&self) -> u32 {
        self.group.div_ceil(2)
    }

    /// Runs: one per (head, key group).
    pub fn runs(&self) -> u32 {
        self.group * self.head_dim / self.key_group
    }

    /// Words of a stream's codes: one per pair of heads and channel.
    pub fn code_words(&self) -> u32 {
        self.pairs() * self.head_dim
    }

    /// Metadata values of a stream: each run's min, scale and code sum.
    pub fn meta_values(&self) -> u32 {
        3 * self.runs()
    }

    /// Bytes of shared memory [`stream_queries`] takes: its two trees of `group · head_dim` f32,
    /// the codes (`pairs · head_dim` words) and the metadata (`3 · runs` f32), each rounded up to
    /// 16 bytes.
    pub fn shared_bytes(&self) -> u32 {
        let tree = self.group * self.head_dim;
        [tree, tree, self.code_words(), self.meta_values()].iter().map(|n| (4 * n).next_multiple_of(16)).sum()
    }
}

/// Quantizes stream `stream`'s queries of `q: [streams · group · head_dim]` with the cube's units
/// into [`StreamQueries`]: min/max trees per (head, key group) run give its min and scale; each
/// code is computed once, packed two heads per word and summed by a tree per run. Synchronizes
/// the cube before it returns.
#[cube]
pub fn stream_queries(q: &Array<f32>, stream: u32, #[comptime] shape: QueryShape) -> StreamQueries {
    let (t, units) = (UNIT_POS, CUBE_DIM);
    let (group, d, kg) = (shape.group, shape.head_dim, shape.key_group);
    let pairs = comptime!(shape.pairs());
    let runs = comptime!(shape.runs());
    let mut lo = SharedMemory::<f32>::new(comptime!((shape.group * shape.head_dim) as usize));
    let mut hi = SharedMemory::<f32>::new(comptime!((shape.group * shape.head_dim) as usize));
    let mut out = StreamQueries {
        codes: SharedMemory::<u32>::new(comptime!(shape.code_words() as usize)),
        meta: SharedMemory::<f32>::new(comptime!(shape.meta_values() as usize)),
    };
    let q_base = stream * group * d;

    // Run `g · parts + part` of `g · d + c`: min and scale.
    let mut i = t;
    while i < group * d {
        let v = q[(q_base + i) as usize];
        lo[i as usize] = v;
        hi[i as usize] = v;
        i += units;
    }
    sync_cube();
    min_max_runs(&mut lo, &mut hi, runs, kg);
    let mut run = t;
    while run < runs {
        let mn = lo[(run * kg) as usize];
        out.meta[run as usize] = mn;
        out.meta[(runs + run) as usize] = scale8(mn, hi[(run * kg) as usize]);
        run += units;
    }
    sync_cube();

    // The codes, packed two heads per word and left in `lo` for the sum tree.
    let mut item = t;
    while item < pairs * d {
        let (pair, c) = (item / d, item % d);
        let mut packed = 0u32;
        #[unroll]
        for half in 0..2u32 {
            let g = 2 * pair + half;
            if g < group {
                let run = (g * d + c) / kg;
                let code =
                    code8(q[(q_base + g * d + c) as usize], out.meta[run as usize], out.meta[(runs + run) as usize]);
                packed |= u32::cast_from(code) << (16 * half);
                lo[(g * d + c) as usize] = code;
                hi[(g * d + c) as usize] = 0.0;
            }
        }
        out.codes[item as usize] = packed;
        item += units;
    }
    sync_cube();
    sum_runs(&mut lo, &mut hi, runs, kg);
    let mut run = t;
    while run < runs {
        out.meta[(2 * runs + run) as usize] = lo[(run * kg) as usize];
        run += units;
    }
    sync_cube();
    out
}

/// Quantizes the queries `q: [streams · group · head_dim]` of one stream per cube (`CUBE_POS_X`)
/// into `q_codes` and `q_meta` ([`stream_queries`]).
#[cube(launch_unchecked)]
pub fn query_kernel(q: &Array<f32>, q_codes: &mut Array<u32>, q_meta: &mut Array<f32>, #[comptime] shape: QueryShape) {
    let stream = CUBE_POS_X;
    let queries = stream_queries(q, stream, shape);
    let codes = comptime!(shape.code_words());
    let meta = comptime!(shape.meta_values());
    let mut i = UNIT_POS;
    while i < codes {
        q_codes[(stream * codes + i) as usize] = queries.codes[i as usize];
        i += CUBE_DIM;
    }
    let mut i = UNIT_POS;
    while i < meta {
        q_meta[(stream * meta + i) as usize] = queries.meta[i as usize];
        i += CUBE_DIM;
    }
}
