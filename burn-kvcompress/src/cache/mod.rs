//! The KV cache abstraction every compression scheme implements, and the dense baseline.
//!
//! A cache holds one layer's post-RoPE keys and values for a batch of sequences and computes
//! attention of new queries over them directly on its own (possibly compressed) representation.
//! A [`KvScheme`] is the configuration that builds one cache per layer.

mod attention;
#[cfg(feature = "cuda")]
mod cuda_pinned;
mod dense;
mod device_state;
mod host_attention;
mod host_buffer;
mod limited_allocator;
mod options;
mod ragged;
mod recording;
mod scheme;
mod slot_buffer;
mod state;
mod upload;

pub use attention::{attention_reference, check_attend_shapes, dense_attention, half_attention};
#[cfg(feature = "cuda")]
pub use cuda_pinned::CudaPinnedAllocator;
pub use dense::{append_slots, DenseCache, DenseScheme, HalfDenseScheme};
pub use device_state::DeviceState;
pub use host_attention::{host_attention, HostShape};
pub use host_buffer::{device_host_allocator, HostAllocator, HostBuffer};
pub use limited_allocator::LimitedAllocator;
pub use options::AttendOptions;
pub use ragged::{RaggedBatch, RaggedCache};
pub use recording::{KvRecorder, LayerRecording, RecordedTensor, RecordingCache, RecordingScheme};
pub use scheme::{CacheGeometry, KvCache, KvScheme, LayerCaches};
pub use slot_buffer::{SlotBuffer, GROWTH_SLOTS};
pub use state::{Bytes, LayerState, StateDType, StateTensor, TransferableCache, TransferableScheme};
