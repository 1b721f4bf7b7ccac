//! Quantizing a decode step's queries to 8 bits, once per (sequence, KV head), before the decode
//! kernel: each of the decode kernel's chunks of the same sequence and KV head reads the codes
//! and their metadata instead of quantizing the group's queries again (which, at 32K slots,
//! 128 chunks per sequence would each have done).
//!
//! Output layout, per stream `batch row · kv_heads + kv head`:
//! - `q_codes[stream · pairs · head_dim + pair · head_dim + c]`: the codes of heads `2 · pair` and
//!   `2 · pair + 1` at channel `c`, in the low and high 16 bits (0 for a missing odd head);
//! - `q_meta[stream · 3 · runs + run]`, `+ runs`, `+ 2 · runs`: each (head, key group) run's min,
//!   scale and code sum, run `g · parts + part`.

use burn_kvcompress::kernels::{min_max_runs, sum_runs};
use cubecl::prelude::*;

use super::kernel::DecodeGeometry;
use crate::kernels::eight_bit::{code8, scale8};

/// Quantizes the group's queries `q[q_base + g · head_dim + c]` to 8 bits per (head, key group) =
/// run `g · parts + part`: min/max trees give `q_min` and `q_scale`, a sum tree of the codes gives
/// `q_sum`. The codes themselves are [`query_code`]'s. Uses
/// `lo` and `hi` as scratch; synchronizes the cube before returning.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn quantize_query_runs(
    q: &Array<f32>,
    q_base: u32,
    lo: &mut SharedMemory<f32>,
    hi: &mut SharedMemory<f32>,
    q_min: &mut SharedMemory<f32>,
    q_scale: &mut SharedMemory<f32>,
    q_sum: &mut SharedMemory<f32>,
    #[comptime] geo: DecodeGeometry,
) {
    let (t, units) = (UNIT_POS, CUBE_DIM);
    let n = geo.group * geo.head_dim;
    let runs = comptime!(geo.group * geo.head_dim / geo.key_group);
    let mut i = t;
    while i < n {
        let v = q[(q_base + i) as usize];
        lo[i as usize] = v;
        hi[i as usize] = v;
        i += units;
    }
    sync_cube();
    min_max_runs(lo, hi, runs, geo.key_group);
    let mut run = t;
    while run < runs {
        let mn = lo[(run * geo.key_group) as usize];
        q_min[run as usize] = mn;
        q_scale[run as usize] = scale8(mn, hi[(run * geo.key_group) as usize]);
        run += units;
    }
    sync_cube();
    let mut i = t;
    while i < n {
        lo[i as usize] = query_code(q, q_base, i, q_min, q_scale, geo);
        hi[i as usize] = 0.0;
        i += units;
    }
    sync_cube();
    sum_runs(lo, hi, runs, geo.key_group);
    let mut run = t;
    while run < runs {
        q_sum[run as usize] = lo[(run * geo.key_group) as usize];
        run += units;
    }
    sync_cube();
}

/// The 8-bit code of query value `i = g · head_dim + c` (as a float), once
/// [`quantize_query_runs`] has set its run's min and scale.
#[cube]
pub fn query_code(
    q: &Array<f32>,
    q_base: u32,
    i: u32,
    q_min: &SharedMemory<f32>,
    q_scale: &SharedMemory<f32>,
    #[comptime] geo: DecodeGeometry,
) -> f32 {
    let run = (i / geo.key_group) as usize;
    code8(q[(q_base + i) as usize], q_min[run], q_scale[run])
}

/// Quantizes the queries `q: [streams · group · head_dim]` of one stream per cube (`CUBE_POS_X`)
/// into `q_codes` and `q_meta`; see the module documentation.
#[cube(launch_unchecked)]
pub fn query_kernel(
    q: &Array<f32>,
    q_codes: &mut Array<u32>,
    q_meta: &mut Array<f32>,
    #[comptime] geo: DecodeGeometry,
) {
    let stream = CUBE_POS_X;
    let (group, d) = (geo.group, geo.head_dim);
    let pairs = comptime!(geo.head_pairs());
    let runs = comptime!(geo.group * geo.head_dim / geo.key_group);
    let mut lo = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim) as usize));
    let mut hi = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim) as usize));
    let mut q_min = SharedMemory::<f32>::new(runs as usize);
    let mut q_scale = SharedMemory::<f32>::new(runs as usize);
    let mut q_sum = SharedMemory::<f32>::new(runs as usize);
    let q_base = stream * group * d;
    quantize_query_runs(q, q_base, &mut lo, &mut hi, &mut q_min, &mut q_scale, &mut q_sum, geo);
    let mut item = UNIT_POS;
    while item < pairs * d {
        let (pair, c) = (item / d, item % d);
        let mut packed = 0u32;
        #[unroll]
        for half in 0..2u32 {
            let g = 2 * pair + half;
            if g < group {
                let code = query_code(q, q_base, g * d + c, &q_min, &q_scale, geo);
                packed |= u32::cast_from(code) << (16 * half);
            }
        }
        q_codes[(stream * pairs * d + item) as usize] = packed;
        item += CUBE_DIM;
    }
    let mut run = UNIT_POS;
    while run < runs {
        let at = stream * 3 * runs + run;
        q_meta[at as usize] = q_min[run as usize];
        q_meta[(at + runs) as usize] = q_scale[run as usize];
        q_meta[(at + 2 * runs) as usize] = q_sum[run as usize];
        run += CUBE_DIM;
    }
}
