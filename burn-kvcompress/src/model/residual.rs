//! [`Residual`]: the residual stream between the decoder layers, with its last addition held back
//! so that the addition and the norm after it run together ([`ModelOps::add_rms_norm`]: one
//! launch on the CubeCL backends, where a decode step is bound by launching).

use burn::{
    nn::RmsNorm,
    tensor::{backend::Backend, Tensor},
};

use super::ModelOps;

/// The residual stream `[rows, hidden]`: its value `x`, plus an addition not yet made (a
/// sublayer's output).
#[derive(Debug, Clone)]
pub struct Residual<B: Backend> {
    x: Tensor<B, 2>,
    pending: Option<Tensor<B, 2>>,
}

impl<B: Backend> Residual<B> {
    /// The stream holding `x` `[rows, hidden]`.
    pub fn new(x: Tensor<B, 2>) -> Self {
        Self { x, pending: None }
    }

    /// The stream `x` with `delta` (same shape) still to add.
    pub fn pending(x: Tensor<B, 2>, delta: Tensor<B, 2>) -> Self {
        Self { x, pending: Some(delta) }
    }

    /// The stream's value (its pending addition made) and that value's norm by `norm`, through
    /// `ops`.
    pub fn normed(self, ops: &ModelOps, norm: &RmsNorm<B>) -> [Tensor<B, 2>; 2] {
        match self.pending {
            Some(delta) => ops.add_rms_norm(norm, self.x, delta),
            None => [self.x.clone(), ops.rms_norm(norm, self.x)],
        }
    }

    /// The stream with `f` applied to its value and its pending addition alike (e.g. keeping
    /// some rows).
    pub fn map(self, f: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>) -> Self {
        Self { pending: self.pending.map(&f), x: f(self.x) }
    }
}
