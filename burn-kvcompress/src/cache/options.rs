//! What an attention call needs besides the tensors: scale, padding and the sliding window.

use burn::tensor::{backend::Backend, Bool, Tensor, TensorData};

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

    /// The mask of *forbidden* pairs, shape `[batch, 1, q_len, total_len]` (true = masked out),
    /// for queries that are the last `q_len` of `total_len` slots.
    pub fn forbidden_mask<B: Backend>(&self, q_len: usize, total_len: usize, device: &B::Device) -> Tensor<B, 4, Bool> {
        let batch = self.key_start.len();
        let first_query = total_len - q_len;
        let mut forbidden = Vec::with_capacity(batch * q_len * total_len);
        for row in 0..batch {
            for qi in 0..q_len {
                for key in 0..total_len {
                    forbidden.push(!self.allows(row, first_query + qi, key));
                }
            }
        }
        Tensor::from_data(TensorData::new(forbidden, [batch, 1, q_len, total_len]), device)
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
}
