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

/// Quantizes the queries `q: [streams · group · head_dim]` of one stream per cube (`CUBE_POS_X`)
/// into `q_codes` and `q_meta`: min/max trees per (head, key group) run give its min and scale;
/// each code is computed once, packed two heads per word and summed by a tree per run.
#[cube(launch_unchecked)]
pub fn query_kernel(
    q: &Array<f32>,
    q_codes: &mut Array<u32>,
    q_meta: &mut Array<f32>,
    #[comptime] geo: DecodeGeometry,
) {
    let stream = CUBE_POS_X;
    let (t, units) = (UNIT_POS, CUBE_DIM);
    let (group, d, kg) = (geo.group, geo.head_dim, geo.key_group);
    let pairs = comptime!(geo.head_pairs());
    let runs = comptime!(geo.group * geo.head_dim / geo.key_group);
    let mut lo = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim) as usize));
    let mut hi = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim) as usize));
    let mut q_min = SharedMemory::<f32>::new(runs as usize);
    let mut q_scale = SharedMemory::<f32>::new(runs as usize);
    let q_base = stream * group * d;
    let meta_base = stream * 3 * runs;

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
        let sc = scale8(mn, hi[(run * kg) as usize]);
        q_min[run as usize] = mn;
        q_scale[run as usize] = sc;
        q_meta[(meta_base + run) as usize] = mn;
        q_meta[(meta_base + runs + run) as usize] = sc;
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
                let code = code8(q[(q_base + g * d + c) as usize], q_min[run as usize], q_scale[run as usize]);
                packed |= u32::cast_from(code) << (16 * half);
                lo[(g * d + c) as usize] = code;
                hi[(g * d + c) as usize] = 0.0;
            }
        }
        q_codes[(stream * pairs * d + item) as usize] = packed;
        item += units;
    }
    sync_cube();
    sum_runs(&mut lo, &mut hi, runs, kg);
    let mut run = t;
    while run < runs {
        q_meta[(meta_base + 2 * runs + run) as usize] = lo[(run * kg) as usize];
        run += units;
    }
}
