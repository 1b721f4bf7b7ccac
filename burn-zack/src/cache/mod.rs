//! The ZACK cache: keys rotated and truncated per KV head after RoPE, values truncated (their
//! rotation is folded into `W_V`), attention on the reduced dimensions.

mod reduce;
mod scheme;
mod state;
mod storage;
mod zack_cache;

// Defined outside `cache` so that the kernels take it without depending on the cache; the
// cache's users find it here.
pub use crate::layout::HeadLayout;
pub use reduce::{reduce_keys, reduce_values};
pub use scheme::ZackScheme;
pub use storage::ReducedStorage;
pub use zack_cache::ZackCache;
