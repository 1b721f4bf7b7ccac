//! The float type a model's weights are held and multiplied in: f32 as loaded, or f16/bf16 for
//! half the bytes a decode step reads (and tensor-core products in prefill).
//!
//! Only the weights and the products with them change type. The residual stream between layers,
//! the norms' inputs and outputs and the projections' outputs are in the weights' type; RMSNorm
//! accumulates its mean square in f32 (Burn's `RmsNorm`); queries, keys and values are cast to f32
//! before RoPE and the KV cache, whose kernels and error bounds are f32's, and the attention
//! output is cast back before the output projection; logits come out in f32.

use burn::{
    module::{Module, ModuleMapper, Param},
    tensor::{
        backend::{Backend, DTypeUsage},
        DType, FloatDType, Tensor,
    },
};

use super::CausalLm;
use crate::error::RunError;

impl<B: Backend> CausalLm<B> {
    /// The float type of the weights (that of the token embedding; all weights share it).
    pub fn weights_dtype(&self) -> DType {
        self.embedding.weight.val().dtype()
    }

    /// This model with every weight cast to `dtype` (RoPE tables stay f32). Fails with
    /// [`RunError::Unsupported`] if the backend has no arithmetic in `dtype` on this device
    /// (ndarray has none in f16 or bf16).
    pub fn with_weights_as(self, dtype: FloatDType) -> Result<Self, RunError> {
        let device = self.embedding.weight.device();
        let wanted = DType::from(dtype);
        if !B::dtype_usage(&device, wanted).contains(DTypeUsage::Arithmetic) {
            return Err(RunError::Unsupported(format!(
                "weights in {wanted:?} need a backend with {wanted:?} arithmetic (wgpu, cuda), not {}",
                B::name(&device)
            )));
        }
        Ok(self.map(&mut CastWeights { dtype }))
    }
}

/// Casts every float parameter of a module to one float type.
struct CastWeights {
    dtype: FloatDType,
}

impl<B: Backend> ModuleMapper<B> for CastWeights {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|t| t.cast(self.dtype))
    }
}
