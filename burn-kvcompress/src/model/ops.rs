//! [`ModelOps`]: how the model runs its weight products, its RMSNorms, its rotary embedding and
//! SwiGLU's gating, so that a backend with kernels for them can replace Burn's ops.
//!
//! A decode step multiplies one row (or a few) by every weight of the model: matrix-vector
//! products bound by reading the weights, which general matrix-product kernels, tiled for many
//! rows, run far below the memory bandwidth. Around them, Burn composes a norm of about eight
//! launches, a rotary embedding of about nine and SwiGLU's gating of eight, and with one row each
//! launch costs more on the host than on the device. [`ModelOpsBackend`] lets a backend supply
//! all four (the CubeCL backends: `kernels::{row_products, rms_norm, add_rms_norm, rotary_qk,
//! swiglu}`, one or two launches each, the products sharing an input in one, a layer's queries
//! and keys and its cache's rotation of them in one); the model holds
//! them as function pointers ([`CausalLm::with_ops`]), since its code is generic over any
//! backend.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use burn::{
    nn::{Linear, RmsNorm},
    tensor::{activation::silu, backend::Backend, FloatDType, Int, Tensor},
};

use super::{CausalLm, RotaryEmbedding};

/// The products of `[rows, d_in]` with one or more weights `[d_in, d_out_i]`, in their order and
/// the operands' float type.
pub type RowProducts<B> = fn(Tensor<B, 2>, Vec<Tensor<B, 2>>) -> Vec<Tensor<B, 2>>;
/// An RMSNorm of rows `[rows, hidden]`, in their float type.
pub type RmsNormOp<B> = fn(&RmsNorm<B>, Tensor<B, 2>) -> Tensor<B, 2>;
/// Rows `x` plus a residual `delta` (`[rows, hidden]` each), and the RMSNorm of that sum.
pub type AddRmsNormOp<B> = fn(&RmsNorm<B>, Tensor<B, 2>, Tensor<B, 2>) -> [Tensor<B, 2>; 2];
/// A layer's queries and keys `[batch · seq, heads or kv_heads · head_dim]` (their float type)
/// rotated by positions `[batch · seq]` (`< max_position`) and multiplied by a cache's rotation
/// `[kv_heads, head_dim, head_dim]` (f32) if any, given `[batch, heads, kv_heads]`: f32 queries
/// `[batch, heads, seq, head_dim]` and keys `[batch, kv_heads, seq, head_dim]` in the given type
/// ([`RotaryEmbedding::apply_qk`]).
pub type RotaryQkOp<B> = fn(
    &RotaryEmbedding<B>,
    [Tensor<B, 2>; 2],
    [usize; 3],
    &Tensor<B, 1, Int>,
    Option<&Tensor<B, 3>>,
    FloatDType,
) -> [Tensor<B, 4>; 2];

/// SwiGLU's gating `silu(gate) · up` of `[rows, intermediate]` rows, in their float type.
pub type SwigluOp<B> = fn(Tensor<B, 2>, Tensor<B, 2>) -> Tensor<B, 2>;

/// One backend's ops, behind [`ModelOps`]'s type erasure.
struct BackendOps<B: Backend> {
    row_products: RowProducts<B>,
    rms_norm: RmsNormOp<B>,
    add_rms_norm: AddRmsNormOp<B>,
    rotary_qk: RotaryQkOp<B>,
    swiglu: SwigluOp<B>,
}

/// How the layers apply their weights, norms and rotary embedding: one backend's
/// [`ModelOpsBackend`] functions, or (the default, and on any other backend) Burn's ops. Held
/// type-erased so that models keep it as a plain, non-module field whatever their backend.
#[derive(Clone, Default)]
pub struct ModelOps {
    ops: Option<Arc<dyn Any + Send + Sync>>,
}

impl ModelOps {
    /// `B`'s own ops ([`ModelOpsBackend`]).
    pub fn of_backend<B: ModelOpsBackend>() -> Self {
        let ops = BackendOps::<B> {
            row_products: B::row_products,
            rms_norm: B::rms_norm,
            add_rms_norm: B::add_rms_norm,
            rotary_qk: B::rotary_qk,
            swiglu: B::swiglu,
        };
        Self { ops: Some(Arc::new(ops)) }
    }

    fn of<B: Backend>(&self) -> Option<&BackendOps<B>> {
        self.ops.as_ref().and_then(|ops| ops.downcast_ref::<BackendOps<B>>())
    }

    /// `x` `[rows, d_in]` times `linear`'s weight `[d_in, d_out]`, plus its bias.
    pub fn project<B: Backend>(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [y] = self.project_all([linear], x);
        y
    }

    /// `x` `[rows, d_in]` times each of `linears`' weights `[d_in, d_out_i]` (plus its bias), in
    /// their order: projections that share their input, which a backend may run in one launch.
    pub fn project_all<B: Backend, const L: usize>(
        &self,
        linears: [&Linear<B>; L],
        x: Tensor<B, 2>,
    ) -> [Tensor<B, 2>; L] {
        let outputs = match self.of::<B>() {
            Some(ops) => (ops.row_products)(x, linears.iter().map(|l| l.weight.val()).collect()),
            None => linears.iter().map(|l| x.clone().matmul(l.weight.val())).collect(),
        };
        let mut outputs = outputs.into_iter();
        linears.map(|linear| {
            let y = outputs.next().expect("one output per weight");
            match &linear.bias {
                Some(bias) => y + bias.val().unsqueeze(),
                None => y,
            }
        })
    }

    /// `norm` applied to the rows `x` `[rows, hidden]`.
    pub fn rms_norm<B: Backend>(&self, norm: &RmsNorm<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        match self.of::<B>() {
            Some(ops) => (ops.rms_norm)(norm, x),
            None => norm.forward(x),
        }
    }

    /// `[x + delta, norm(x + delta)]` for rows `x`, `delta` `[rows, hidden]`: a residual addition
    /// and the norm after it.
    pub fn add_rms_norm<B: Backend>(
        &self,
        norm: &RmsNorm<B>,
        x: Tensor<B, 2>,
        delta: Tensor<B, 2>,
    ) -> [Tensor<B, 2>; 2] {
        match self.of::<B>() {
            Some(ops) => (ops.add_rms_norm)(norm, x, delta),
            None => {
                let sum = x + delta;
                [sum.clone(), norm.forward(sum)]
            }
        }
    }

    /// A layer's queries and keys `[q, k]` (`[batch · seq, heads or kv_heads · head_dim]`)
    /// rotated by `positions` `[batch · seq]` (each `< rope.max_position()`) and multiplied by
    /// `rotation` where given (a cache's [`key_rotation`](crate::cache::KvCache::key_rotation)),
    /// given `[batch, heads, kv_heads]`: f32 queries `[batch, heads, seq, head_dim]` and keys
    /// `[batch, kv_heads, seq, head_dim]` in `k_dtype` ([`RotaryEmbedding::apply_qk`]).
    pub fn rotary_qk<B: Backend>(
        &self,
        rope: &RotaryEmbedding<B>,
        qk: [Tensor<B, 2>; 2],
        heads: [usize; 3],
        positions: &Tensor<B, 1, Int>,
        rotation: Option<&Tensor<B, 3>>,
        k_dtype: FloatDType,
    ) -> [Tensor<B, 4>; 2] {
        match self.of::<B>() {
            Some(ops) => (ops.rotary_qk)(rope, qk, heads, positions, rotation, k_dtype),
            None => rope.apply_qk(qk, heads, positions, rotation, k_dtype),
        }
    }

    /// SwiGLU's gating `silu(gate) · up` of `[rows, intermediate]` rows.
    pub fn swiglu<B: Backend>(&self, gate: Tensor<B, 2>, up: Tensor<B, 2>) -> Tensor<B, 2> {
        match self.of::<B>() {
            Some(ops) => (ops.swiglu)(gate, up),
            None => silu(gate) * up,
        }
    }
}

impl fmt::Debug for ModelOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.ops.is_some() { "backend ops" } else { "Burn ops" })
    }
}

/// A backend's ops for the model's products, norms and rotary embedding; each defaults to Burn's
/// ops and must equal them up to the order of the f32 sums and the roundings its implementation
/// documents.
pub trait ModelOpsBackend: Backend {
    /// `x` `[rows, d_in]` times `w` `[d_in, d_out]`, in their float type (both the same).
    fn row_product(x: Tensor<Self, 2>, w: Tensor<Self, 2>) -> Tensor<Self, 2> {
        x.matmul(w)
    }

    /// `x` `[rows, d_in]` times each of `weights` `[d_in, d_out_i]`, in their order.
    fn row_products(x: Tensor<Self, 2>, weights: Vec<Tensor<Self, 2>>) -> Vec<Tensor<Self, 2>> {
        weights.into_iter().map(|w| Self::row_product(x.clone(), w)).collect()
    }

    /// `norm` applied to the rows `x` `[rows, hidden]`, in their float type.
    fn rms_norm(norm: &RmsNorm<Self>, x: Tensor<Self, 2>) -> Tensor<Self, 2> {
        norm.forward(x)
    }

    /// `[x + delta, norm(x + delta)]` for rows `x`, `delta` `[rows, hidden]` in their float type
    /// (the sum as Burn's addition computes it).
    fn add_rms_norm(norm: &RmsNorm<Self>, x: Tensor<Self, 2>, delta: Tensor<Self, 2>) -> [Tensor<Self, 2>; 2] {
        let sum = x + delta;
        [sum.clone(), Self::rms_norm(norm, sum)]
    }

    /// A layer's queries and keys through the rotary embedding and a cache's rotation
    /// ([`ModelOps::rotary_qk`]).
    fn rotary_qk(
        rope: &RotaryEmbedding<Self>,
        qk: [Tensor<Self, 2>; 2],
        heads: [usize; 3],
        positions: &Tensor<Self, 1, Int>,
        rotation: Option<&Tensor<Self, 3>>,
        k_dtype: FloatDType,
    ) -> [Tensor<Self, 4>; 2] {
        rope.apply_qk(qk, heads, positions, rotation, k_dtype)
    }

    /// SwiGLU's gating `silu(gate) · up` of `[rows, intermediate]` rows, in their float type.
    fn swiglu(gate: Tensor<Self, 2>, up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        silu(gate) * up
    }
}

#[cfg(feature = "ndarray")]
impl ModelOpsBackend for burn::backend::NdArray<f32> {}

#[cfg(feature = "flex")]
impl ModelOpsBackend for burn::backend::Flex<f32, i32> {}

impl<B: Backend> CausalLm<B> {
    /// This model with every weight product (the layers' projections and the output head), every
    /// norm and the rotary embedding through `ops`.
    pub fn with_ops(mut self, ops: ModelOps) -> Self {
        for layer in &mut self.layers {
            layer.ops = ops.clone();
            layer.attention.ops = ops.clone();
            layer.mlp.ops = ops.clone();
        }
        self.ops = ops;
        self
    }
}
