//! The lookup table of one decode step: every query head's scaled products with every key
//! centroid, `T[i, g, c] = scale · <q_g^(i), C_K^i[c]>` (MILLION's step ①), built by one kernel.

use cubecl::prelude::*;

use crate::{kernels::PqShape, PqConfig};

/// The decode step's shapes: the quantizer's, and the query heads per KV head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeShape {
    /// The quantizer's shapes.
    pub pq: PqShape,
    /// Query heads per KV head.
    pub group: u32,
}

impl DecodeShape {
    /// The decode step's shapes of `config` for `group` query heads per KV head of `head_dim`
    /// channels.
    pub fn of(config: &PqConfig, group: usize, head_dim: usize) -> Self {
        Self { pq: PqShape::of(config, head_dim), group: group as u32 }
    }

    /// Floats of one (sequence, KV head)'s table: `subspaces · centroids · group`.
    pub fn table_floats(&self) -> u32 {
        self.pq.subspaces * self.pq.centroids * self.group
    }
}

/// One cube per (subspace `i` = `CUBE_POS_X`, stream = `CUBE_POS_Y` = batch row · KV heads + KV
/// head); its units take the (centroid, head) pairs of the subspace.
///
/// - `q`: `[batch, kv_heads * group, head_dim]`; `books`: `[groups, subspaces, centroids,
///   sub_dim]` (`groups` is 1, or `kv_heads` when `per_head_books` is 1);
/// - `table`: `[batch, kv_heads, subspaces, group, centroids]` (a head's entries of a subspace are
///   adjacent: lanes looking up random codes spread over all shared-memory banks).
#[cube(launch_unchecked)]
pub fn table_kernel(
    q: &Array<f32>,
    books: &Array<f32>,
    table: &mut Array<f32>,
    kv_heads: u32,
    scale: f32,
    per_head_books: u32,
    #[comptime] shape: DecodeShape,
) {
    let i = CUBE_POS_X;
    let stream = CUBE_POS_Y;
    let group = shape.group;
    let ds = shape.pq.sub_dim;
    let book = (stream % kv_heads) * per_head_books;
    let mut pair = UNIT_POS;
    while pair < shape.pq.centroids * group {
        let g = pair / shape.pq.centroids;
        let c = pair % shape.pq.centroids;
        let q_base = (stream * group + g) * shape.pq.head_dim + i * ds;
        let c_base = ((book * shape.pq.subspaces + i) * shape.pq.centroids + c) * ds;
        let mut dot = 0.0f32;
        for s in 0..ds {
            dot += q[(q_base + s) as usize] * books[(c_base + s) as usize];
        }
        table[(((stream * shape.pq.subspaces + i) * group + g) * shape.pq.centroids + c) as usize] = dot * scale;
        pair += CUBE_DIM;
    }
}
