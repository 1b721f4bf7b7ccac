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
        let in_window = self.window.is_none_or(|w| query_slot - key_slot < w);
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
