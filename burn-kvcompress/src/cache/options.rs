//! What an attention call needs besides the tensors: scale, padding and the sliding window.

use burn::tensor::{backend::Backend, Bool, Int, Tensor, TensorData};

/// Options of one attention call.
#[derive(Debug, Clone, PartialEq)]
pub struct AttendOptions {
    /// Softmax scale applied to `q · k`, normally `1 / sqrt(head_dim)` of the *original* head
    /// dimension (schemes that shrink the head dimension keep it).
    pub scale: f32,
    /// Per batch row, the first cache slot holding a real token; slots before it are left
    /// padding and are never attended to (except by a padding query itself, to itself, which keeps
    /// padded rows finite).
    pub key_start: Vec<usize>,
    /// Sliding window (Mistral): a query at slot `i` sees keys at slots `j` with `i - j < window`.
    pub window: Option<usize>,
}

impl AttendOptions {
    /// Whether the query at slot `query_slot` of batch row `row` may attend to key slot `key_slot`.
    pub fn allows(&self, row: usize, query_slot: usize, key_slot: usize) -> bool {
        if key_slot == query_slot {
            return true;
        }
        let causal = key_slot < query_slot;
        let real = key_slot >= self.key_start[row];
        let in_window = self.window.is_none_or(|w| query_slot < key_slot + w);
        causal && real && in_window
    }

    /// Whether the last `q_len` of `total_len` slots may attend to every key slot up to their
    /// own: a single query (the newest slot), no left padding and no window that cuts the
    /// cache. Decode steps are usually such; [`Self::forbidden_mask`] would then be all false.
    pub fn forbids_nothing(&self, q_len: usize, total_len: usize) -> bool {
        q_len == 1 && self.key_start.iter().all(|&s| s == 0) && self.window.is_none_or(|w| w >= total_len)
    }

    /// The mask of *forbidden* pairs, shape `[batch, 1, q_len, total_len]` (true = masked out),
    /// for queries that are the last `q_len` of `total_len` slots: the complement of
    /// [`Self::allows`], built on the device from slot indices (a long prompt's `q_len ×
    /// total_len` mask never passes through the host).
    pub fn forbidden_mask<B: Backend>(&self, q_len: usize, total_len: usize, device: &B::Device) -> Tensor<B, 4, Bool> {
        let batch = self.key_start.len();
        let shape = [batch, 1, q_len, total_len];
        let slots =
            |range: std::ops::Range<usize>| Tensor::<B, 1, Int>::arange(range.start as i64..range.end as i64, device);
        let query = slots(total_len - q_len..total_len).reshape([1, 1, q_len, 1]).expand(shape);
        let key = slots(0..total_len).reshape([1, 1, 1, total_len]).expand(shape);
        let starts: Vec<i64> = self.key_start.iter().map(|&s| s as i64).collect();
        let start = Tensor::<B, 1, Int>::from_data(TensorData::new(starts, [batch]), device).reshape([batch, 1, 1, 1]);
        let mut allowed = key.clone().lower(query.clone()).bool_and(key.clone().greater_equal(start.expand(shape)));
        if let Some(window) = self.window {
            allowed = allowed.bool_and(query.clone().lower(key.clone().add_scalar(window as i64)));
        }
        allowed.bool_or(key.equal(query)).bool_not()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_is_causal_windowed_and_skips_padding() {
        let o = AttendOptions { scale: 1.0, key_start: vec![0, 2], window: Some(3) };
        // Row 0, query at slot 4: keys 2, 3, 4 (window of 3), never the future.
        let seen: Vec<usize> = (0..8).filter(|&k| o.allows(0, 4, k)).collect();
        assert_eq!(seen, vec![2, 3, 4]);
        // Row 1 starts at slot 2: a query at slot 3 sees 2 and 3 only.
        assert_eq!((0..8).filter(|&k| o.allows(1, 3, k)).collect::<Vec<_>>(), vec![2, 3]);
        // A padding query sees only itself.
        assert_eq!((0..8).filter(|&k| o.allows(1, 0, k)).collect::<Vec<_>>(), vec![0]);
        let full = AttendOptions { window: None, ..o };
        assert_eq!((0..8).filter(|&k| full.allows(0, 4, k)).count(), 5);
    }

    #[test]
    fn forbids_nothing_only_where_the_mask_is_all_false() {
        let device = Default::default();
        for key_start in [vec![0, 0], vec![0, 2]] {
            for window in [None, Some(3), Some(7), Some(8)] {
                let o = AttendOptions { scale: 1.0, key_start: key_start.clone(), window };
                for (q_len, total) in [(1, 1), (1, 7), (2, 7), (7, 7)] {
                    let mask = o.forbidden_mask::<burn::backend::NdArray>(q_len, total, &device);
                    let all_false = !mask.into_data().into_vec::<bool>().unwrap().contains(&true);
                    // `forbids_nothing` may miss an all-false mask (several queries) but never
                    // claims one that forbids something.
                    assert!(!o.forbids_nothing(q_len, total) || all_false, "{o:?}, {q_len} of {total}");
                    // And it finds every one of a single query without padding (windows included).
                    if q_len == 1 && key_start == [0, 0] {
                        assert_eq!(o.forbids_nothing(q_len, total), all_false, "{o:?}, 1 of {total}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_device_mask_forbids_exactly_what_allows_refuses() {
        let device = Default::default();
        for window in [None, Some(1), Some(3), Some(100)] {
            let o = AttendOptions { scale: 1.0, key_start: vec![0, 3, 6], window };
            for (q_len, total) in [(1, 1), (1, 7), (5, 7), (7, 7), (2, 9)] {
                let mask = o.forbidden_mask::<burn::backend::NdArray>(q_len, total, &device);
                assert_eq!(mask.dims(), [3, 1, q_len, total]);
                let got: Vec<bool> = mask.into_data().into_vec().unwrap();
                let mut want = Vec::new();
                for row in 0..3 {
                    for slot in total - q_len..total {
                        want.extend((0..total).map(|key| !o.allows(row, slot, key)));
                    }
                }
                assert_eq!(got, want, "window {window:?}, {q_len} queries of {total} slots");
            }
        }
    }
}
