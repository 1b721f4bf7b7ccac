//! A received layer's tensors on the decode device, uploaded together before the importing cache
//! reads them by name.
//!
//! An import runs on the thread that decodes, so every running request waits for it. What a
//! CUDA upload costs beyond its bytes is ordering it around CubeCL's stream (a drain before, a
//! wait after, ~0.1 ms each time); a HACK layer has eight tensors, so uploading them one by one
//! paid that eight times a layer. [`LayerState::upload`] writes a layer's tensors under one drain
//! and one wait; the cache then takes them at the rank and type it holds them.

use burn::tensor::{backend::Backend, FloatDType, Int, Tensor};

use super::state::{LayerState, StateDType, StateTensor};
use crate::error::CacheError;

/// An uploaded tensor, flat: reshaped to the rank its reader asks for (a contiguous reshape
/// moves nothing).
// Only a backend that uploads ahead (CUDA) builds one.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
#[derive(Debug, Clone)]
pub(super) enum FlatTensor<B: Backend> {
    /// An f32 or f16 tensor, in its state dtype.
    Float(Tensor<B, 1>),
    /// An i32 tensor.
    Int(Tensor<B, 1, Int>),
}

/// A [`LayerState`] with its tensors on a device, read by name like [`StateTensor`]'s
/// `to_float`, `to_float_as` and `to_int`, with the same checks and values.
///
/// Which tensors are uploaded ahead is the backend's choice: on CUDA every well-formed, non-empty
/// f32, f16 and i32 tensor (integers when the backend's are i32) in one batched write; elsewhere
/// none, and each read uploads its tensor as `StateTensor` does. Narrow integers ([`StateDType::U8`],
/// [`StateDType::U16`]) are widened on the host when read.
#[derive(Debug)]
pub struct DeviceState<'a, B: Backend> {
    state: &'a LayerState,
    device: B::Device,
    /// Index-aligned with `state.tensors`; `None` is uploaded when read.
    uploaded: Vec<Option<FlatTensor<B>>>,
}

impl LayerState {
    /// The layer's tensors on `device` (see [`DeviceState`]): an importing cache reads them from
    /// here, so that the upload's fixed costs are paid once a layer, not once a tensor.
    pub fn upload<B: Backend>(&self, device: &B::Device) -> DeviceState<'_, B> {
        let uploaded = super::upload::upload_all::<B>(&self.tensors, device);
        DeviceState { state: self, device: device.clone(), uploaded }
    }
}

impl<B: Backend> DeviceState<'_, B> {
    /// The host state the tensors came from.
    pub fn state(&self) -> &LayerState {
        self.state
    }

    /// The tensor called `name` and its upload, if made ahead.
    fn find(&self, name: &str) -> Result<(&StateTensor, Option<&FlatTensor<B>>), CacheError> {
        let index = self.state.tensors.iter().position(|t| t.name == name);
        let index = index.ok_or_else(|| CacheError::State(format!("missing tensor `{name}`")))?;
        Ok((&self.state.tensors[index], self.uploaded[index].as_ref()))
    }

    /// The tensor called `name` as an f32 tensor of rank `D` (see [`StateTensor::to_float`]).
    pub fn to_float<const D: usize>(&self, name: &str) -> Result<Tensor<B, D>, CacheError> {
        self.to_float_as(name, FloatDType::F32)
    }

    /// The tensor called `name` as a float tensor of rank `D` and type `dtype` (see
    /// [`StateTensor::to_float_as`]).
    pub fn to_float_as<const D: usize>(&self, name: &str, dtype: FloatDType) -> Result<Tensor<B, D>, CacheError> {
        match self.find(name)? {
            (tensor, Some(FlatTensor::Float(flat))) => {
                let shape = tensor.check::<D>(&[StateDType::F32, StateDType::F16])?;
                Ok(flat.clone().reshape(shape).cast(dtype))
            }
            (tensor, _) => tensor.to_float_as(&self.device, dtype),
        }
    }

    /// The tensor called `name` as an integer tensor of rank `D` (see [`StateTensor::to_int`]).
    pub fn to_int<const D: usize>(&self, name: &str) -> Result<Tensor<B, D, Int>, CacheError> {
        match self.find(name)? {
            (tensor, Some(FlatTensor::Int(flat))) => {
                let shape = tensor.check::<D>(&[StateDType::I32, StateDType::U16, StateDType::U8])?;
                Ok(flat.clone().reshape(shape))
            }
            (tensor, _) => tensor.to_int(&self.device),
        }
    }
}
