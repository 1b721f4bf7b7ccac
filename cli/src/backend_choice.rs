//! `--backend ndarray|wgpu|cuda`: which Burn backend a program runs on, and [`KernelBackend`]: what
//! the programs need of it.

use burn_hack_attn::kernels::HackBackend;
use burn_kvcompress::model::ModelOpsBackend;
use burn_million_pq::kernels::PqBackend;
use burn_zack::kernels::ZackBackend;
use clap::ValueEnum;

/// A backend that runs every scheme's operations (HACK's, MILLION's and ZACK's), which the
/// programs' run functions need to take any `--kv`, and the model's own kernels (weight products,
/// norms, rotary embedding: `ModelOpsBackend`).
pub trait KernelBackend: HackBackend + PqBackend + ZackBackend + ModelOpsBackend {}

impl<B: HackBackend + PqBackend + ZackBackend + ModelOpsBackend> KernelBackend for B {}

/// A backend selectable on the command line (wgpu and cuda need the crate features of the
/// same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CPU, ndarray (f32): the reference.
    Ndarray,
    /// CPU, burn-flex (f32): gemm matrix products, SIMD, threads.
    Flex,
    /// wgpu: Vulkan/Metal/DX12 GPUs, or the CPU through Mesa's lavapipe.
    Wgpu,
    /// CUDA (NVIDIA GPUs).
    Cuda,
}

/// Calls `$run::<Backend>($device)` for the chosen backend, or fails if the binary was built
/// without that backend's feature.
#[macro_export]
macro_rules! with_backend {
    ($choice:expr, $run:ident ( $($arg:expr),* )) => {{
        use $crate::backend_choice::BackendChoice;
        match $choice {
            BackendChoice::Ndarray => {
                $run::<burn_kvcompress::backend::NdArray>(Default::default(), $($arg),*)
            }
            BackendChoice::Flex => $run::<burn_kvcompress::backend::Flex>(Default::default(), $($arg),*),
            #[cfg(feature = "wgpu")]
            BackendChoice::Wgpu => $run::<burn_kvcompress::backend::Wgpu>(Default::default(), $($arg),*),
            #[cfg(feature = "cuda")]
            BackendChoice::Cuda => $run::<burn_kvcompress::backend::Cuda>(Default::default(), $($arg),*),
            #[allow(unreachable_patterns)]
            other => anyhow::bail!("this binary was built without the {other:?} backend: rebuild with --features {}", format!("{other:?}").to_lowercase()),
        }
    }};
}
