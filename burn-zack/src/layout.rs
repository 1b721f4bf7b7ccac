//! Where each KV head's reduced coordinates sit in a layer's packed tensors.

use std::ops::Range;

/// One layer's per-KV-head ranks, and the column ranges they occupy when heads are packed side by
/// side: keys `[batch, slots, Σ k_qk]`, values `[batch, slots, Σ k_vo]`, the query/key basis
/// `[head_dim, Σ k_qk]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadLayout {
    /// Dimension of an uncompressed head.
    pub head_dim: usize,
    /// Per KV head, kept query/key dimensions.
    pub qk_ranks: Vec<usize>,
    /// Per KV head, kept value dimensions.
    pub vo_ranks: Vec<usize>,
}

impl HeadLayout {
    /// KV heads.
    pub fn kv_heads(&self) -> usize {
        self.qk_ranks.len()
    }

    /// `Σ k_qk`: the width of packed keys.
    pub fn key_width(&self) -> usize {
        self.qk_ranks.iter().sum()
    }

    /// `Σ k_vo`: the width of packed values.
    pub fn value_width(&self) -> usize {
        self.vo_ranks.iter().sum()
    }

    /// Columns of KV head `head` in packed keys (and in the basis).
    pub fn key_columns(&self, head: usize) -> Range<usize> {
        columns(&self.qk_ranks, head)
    }

    /// Columns of KV head `head` in packed values.
    pub fn value_columns(&self, head: usize) -> Range<usize> {
        columns(&self.vo_ranks, head)
    }

    /// Whether every head's key and value rank is a multiple of `step`, hence also every head's
    /// column offsets and both packed widths (sums of ranks).
    pub fn ranks_multiple_of(&self, step: usize) -> bool {
        self.qk_ranks.iter().chain(&self.vo_ranks).all(|rank| rank.is_multiple_of(step))
    }

    /// Whether some head keeps no key or no value coordinate (rank 0).
    pub fn has_empty_head(&self) -> bool {
        self.qk_ranks.iter().chain(&self.vo_ranks).any(|&rank| rank == 0)
    }
}

fn columns(ranks: &[usize], head: usize) -> Range<usize> {
    let start: usize = ranks[..head].iter().sum();
    start..start + ranks[head]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_heads_side_by_side() {
        let layout = HeadLayout { head_dim: 8, qk_ranks: vec![3, 8, 1], vo_ranks: vec![2, 2, 5] };
        assert_eq!((layout.key_width(), layout.value_width()), (12, 9));
        assert_eq!([layout.key_columns(0), layout.key_columns(1), layout.key_columns(2)], [0..3, 3..11, 11..12]);
        assert_eq!(layout.value_columns(2), 4..9);
        assert!(!layout.has_empty_head());
        assert!(HeadLayout { head_dim: 8, qk_ranks: vec![3, 0], vo_ranks: vec![2, 2] }.has_empty_head());
        let eights = HeadLayout { head_dim: 128, qk_ranks: vec![32, 40], vo_ranks: vec![48, 8] };
        assert!(eights.ranks_multiple_of(8) && !eights.ranks_multiple_of(16));
        assert!(layout.ranks_multiple_of(1) && !layout.ranks_multiple_of(2));
    }
}
