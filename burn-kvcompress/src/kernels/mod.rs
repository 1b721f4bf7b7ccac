//! CubeCL building blocks shared by the schemes' kernels (wgpu and cuda features): dense output
//! buffers, dense kernel arguments from tensors, the in-cube softmax of a split's scores, tree
//! reductions over runs of shared memory, the log-sum-exp merge of split-sequence
//! (flash-decoding) partial results, and the model's own ops in one or two launches where Burn's
//! take many (a decode step is bound by launching them): the products of a few activation rows
//! with the weights (on tensor cores where the device has them), RMSNorm (alone or after a
//! residual addition), the rotary embedding of a layer's queries and keys (with a cache's
//! rotation of them), a step's keys and values written into their cache buffers, and SwiGLU's
//! gating; a prompt's products through the fastest of cubek's matrix-product variants that
//! launches (or cuBLAS); and attention over an f16 cache on tensor cores (flash attention
//! for a prompt, flash decoding for a step).
//!
//! # Bounds
//!
//! Every kernel of the workspace launches unchecked (`launch_unchecked`): CubeCL's checked
//! launch clamps every array index and selects 0 past the end, a min and a select on each access
//! of the hot loops. Each launch site states, in a `SAFETY` comment, why its indices stay within
//! the buffers it passes. That claim is tested: with a `cubecl.toml` holding
//!
//! ```toml
//! [compilation]
//! check_mode = "validate"
//! ```
//!
//! in the working directory, CubeCL compiles unchecked launches with bounds checks that print
//! `[VALIDATION <kernel>]: Encountered OOB ...` on the device. `cli/bench/validate_bounds.sh`
//! runs the kernel tests built for CUDA that way and fails on any such line. (wgpu clamps out
//! of bounds accesses itself and cannot print, so CI on lavapipe checks the results, not the
//! bounds.)

mod buffers;
#[cfg(feature = "cuda")]
mod cublas_product;
#[cfg(feature = "cuda")]
mod cuda_context;
#[cfg(feature = "cuda")]
mod cuda_upload;
mod flash_attention;
mod key_start;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod mask;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod merge;
mod model_ops;
mod prompt_product;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod rms_norm;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod rotary;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod row_product;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod row_mma;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod runs;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod slot_write;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod softmax;
// `#[cube]` expands each kernel into undocumented helper items.
#[allow(missing_docs)]
mod swiglu;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
pub mod warp_mma;
mod warp_splits;
// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod weight_slots;

pub use buffers::{
    dense_arg, dense_output, dense_output_of, dense_outputs, float_arg, int_arg, kernel_float, lies_dense,
    pitched_rows_arg, widest_vector, CubeF32,
};
#[cfg(feature = "cuda")]
pub use cublas_product::{cublas_product, CublasUnavailable};
#[cfg(feature = "cuda")]
pub(crate) use cuda_context::make_current;
#[cfg(feature = "cuda")]
pub use cuda_upload::{cuda_write, cuda_write_all, WriteRefused};
pub use flash_attention::{flash_attention, flash_geometry, FlashGeometry, MAX_HEAD_DIM};
pub use key_start::key_start_arg;
pub use mask::{decode_slot_visible, first_visible_slot, slot_visible};
pub use merge::{masked_score, merge_decode_output, merge_partials, SplitOut, SplitPartials, MASKED_SCORE, SM_UNITS};
pub use prompt_product::{product_by, prompt_product};
pub use rms_norm::{add_rms_norm, rms_norm};
pub use rotary::{rotary_applies, rotary_qk, rotate_heads_kernel};
pub use row_mma::{row_mma_applies, MMA_MAX_ROWS, MMA_MIN_ROWS};
pub use row_product::{row_product, row_products, MAX_ROWS, MAX_WEIGHTS};
pub use runs::{min_max_runs, sum_runs};
pub use slot_write::write_slots;
pub use softmax::{split_masses, split_softmax};
pub use swiglu::swiglu;
pub use warp_splits::{WarpSplits, SM_REGISTERS};
