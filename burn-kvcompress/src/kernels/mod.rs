//! CubeCL building blocks shared by the schemes' kernels (wgpu and cuda features): dense output
//! buffers, contiguous kernel arguments from tensors, the in-cube softmax of a split's scores, and
//! the log-sum-exp merge of split-sequence (flash-decoding) partial results.

mod buffers;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod mask;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod merge;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod softmax;

pub use buffers::{dense_output, float_arg, int_arg, CubeF32};
pub use mask::decode_slot_visible;
pub use merge::{masked_score, merge_partials, SplitPartials};
pub use softmax::{split_masses, split_softmax};
