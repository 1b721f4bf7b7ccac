//! [`Projection`]: how the model multiplies activations by its weights, so that a backend with
//! a kernel for decode-sized products can replace the general matrix product.
//!
//! A decode step multiplies one row (or a few) by every weight of the model: a matrix-vector
//! product bound by reading the weights, which general matrix-product kernels, tiled for many
//! rows, run far below the memory bandwidth. [`RowProductBackend`] lets a backend supply a
//! product for such shapes (the CubeCL backends: `kernels::row_product`); the model holds it as
//! a function pointer ([`CausalLm::with_projection`]), since its code is generic over any
//! backend.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use burn::{
    nn::Linear,
    tensor::{backend::Backend, Tensor},
};

use super::CausalLm;

/// A product `[rows, d_in] · [d_in, d_out]` to `[rows, d_out]` in the operands' float type.
pub type RowProduct<B> = fn(Tensor<B, 2>, Tensor<B, 2>) -> Tensor<B, 2>;

/// How a layer applies its `Linear` weights: a [`RowProduct`] of one backend, or (the default,
/// and on any other backend) Burn's matrix product. The product is held type-erased so that
/// models keep it as a plain, non-module field whatever their backend.
#[derive(Clone, Default)]
pub struct Projection {
    product: Option<Arc<dyn Any + Send + Sync>>,
    name: &'static str,
}

impl Projection {
    /// A projection through `product` on backend `B`, called `name` in debug output.
    pub fn new<B: Backend>(product: RowProduct<B>, name: &'static str) -> Self {
        Self { product: Some(Arc::new(product)), name }
    }

    /// `B`'s own product for decode-sized inputs ([`RowProductBackend::row_product`]).
    pub fn of_backend<B: RowProductBackend>() -> Self {
        Self::new::<B>(B::row_product, "backend row product")
    }

    /// `x` `[rows, d_in]` times `linear`'s weight `[d_in, d_out]`, plus its bias.
    pub fn apply<B: Backend>(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let w = linear.weight.val();
        let y = match self.product.as_ref().and_then(|p| p.downcast_ref::<RowProduct<B>>()) {
            Some(product) => product(x, w),
            None => x.matmul(w),
        };
        match &linear.bias {
            Some(bias) => y + bias.val().unsqueeze(),
            None => y,
        }
    }
}

impl fmt::Debug for Projection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.product.is_some() { self.name } else { "matmul" })
    }
}

/// A backend's product of a few activation rows with a weight matrix.
pub trait RowProductBackend: Backend {
    /// `x` `[rows, d_in]` times `w` `[d_in, d_out]`, in their float type (both the same).
    /// Must equal `x.matmul(w)` up to the summation order.
    fn row_product(x: Tensor<Self, 2>, w: Tensor<Self, 2>) -> Tensor<Self, 2>;
}

#[cfg(feature = "ndarray")]
impl RowProductBackend for burn::backend::NdArray<f32> {
    fn row_product(x: Tensor<Self, 2>, w: Tensor<Self, 2>) -> Tensor<Self, 2> {
        x.matmul(w)
    }
}

impl<B: Backend> CausalLm<B> {
    /// This model with every weight product (the layers' projections and the output head)
    /// through `projection`.
    pub fn with_projection(mut self, projection: Projection) -> Self {
        for layer in &mut self.layers {
            layer.attention.projection = projection.clone();
            layer.mlp.projection = projection.clone();
        }
        self.projection = projection;
        self
    }
}
