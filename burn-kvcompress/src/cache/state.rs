//! The compressed-state container: one layer's cached state as named host tensors, the form in
//! which `burn-kvtransfer` moves a cache between processes, whatever scheme filled it.
//!
//! A scheme's cache exports its device tensors (codes, metadata, sums, float tails) into a
//! [`LayerState`] ([`TransferableCache`]); the scheme rebuilds the cache from one on another
//! device ([`TransferableScheme`]). The
//! container holds plain little-endian bytes, so a received state can be checked (names, dtypes,
//! shapes, sizes) before any device allocation. The bytes are a shared [`Bytes`] buffer: cloning a
//! state, holding it for transfer and slicing a received buffer into tensors copy nothing.

use burn::tensor::{backend::Backend, DType, FloatDType, Int, Tensor, TensorData};
pub use bytes::Bytes;
use half::f16;

use super::{
    upload::{upload_float, upload_int},
    CacheGeometry, KvCache, KvScheme,
};
use crate::{backend::host_f32, error::CacheError};

/// Element type of a [`StateTensor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateDType {
    /// 32-bit float.
    F32,
    /// 32-bit integer (also packed codes: 32-bit words holding bit patterns).
    I32,
    /// IEEE 754 half-precision float (a cache that stores 16-bit floats sends them as they are).
    F16,
    /// 8-bit unsigned integer (small integers sent at their storage width, e.g. code sums).
    U8,
    /// 16-bit unsigned integer.
    U16,
}

impl StateDType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::U16 => 2,
            Self::U8 => 1,
        }
    }

    /// Stable wire id of the dtype.
    pub fn id(self) -> u8 {
        match self {
            Self::F32 => 0,
            Self::I32 => 1,
            Self::F16 => 2,
            Self::U8 => 3,
            Self::U16 => 4,
        }
    }

    /// The dtype of a wire id, if known.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0 => Some(Self::F32),
            1 => Some(Self::I32),
            2 => Some(Self::F16),
            3 => Some(Self::U8),
            4 => Some(Self::U16),
            _ => None,
        }
    }
}

/// One named tensor of a layer's state, as little-endian host bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateTensor {
    /// Name within the layer (e.g. `k`, `k_codes`, `v_tail`).
    pub name: String,
    /// Element type.
    pub dtype: StateDType,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// `shape.product() * dtype.size()` bytes, little-endian (shared, cheap to clone).
    pub bytes: Bytes,
}

// The host tensors' memory is taken as the little-endian wire bytes as it is.
const _: () = assert!(cfg!(target_endian = "little"), "StateTensor assumes a little-endian host");

/// A host vector of plain values seen as its bytes, so it becomes a [`Bytes`] without a copy.
struct PodBytes<T>(Vec<T>);

impl<T: bytemuck::Pod> AsRef<[u8]> for PodBytes<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// `data` converted to `T` on the host, its vector becoming the bytes without another copy.
fn host_bytes<T: burn::tensor::Element + bytemuck::Pod>(data: TensorData) -> Bytes {
    Bytes::from_owner(PodBytes(data.convert::<T>().into_vec::<T>().expect("host data of the converted type")))
}

/// `values` as `T`, little-endian bytes; a value `T` does not hold is a [`CacheError::State`]
/// naming `name` and `dtype`.
fn narrow_ints<T: TryFrom<i32> + bytemuck::Pod + Send>(
    name: &str,
    values: &[i32],
    dtype: StateDType,
) -> Result<Bytes, CacheError> {
    let narrow = values
        .iter()
        .map(|&v| T::try_from(v).map_err(|_| CacheError::State(format!("tensor `{name}`: {v} does not fit {dtype:?}"))))
        .collect::<Result<Vec<T>, _>>()?;
    Ok(Bytes::from_owner(PodBytes(narrow)))
}

impl StateTensor {
    /// Copies a float tensor to the host (the host vector becomes the bytes, not copied again): an
    /// f16 tensor as [`StateDType::F16`], any other float tensor as [`StateDType::F32`].
    pub fn from_float<B: Backend, const D: usize>(name: &str, tensor: &Tensor<B, D>) -> Self {
        let shape = tensor.dims().to_vec();
        let data = tensor.to_data();
        let (dtype, bytes) = match tensor.dtype() {
            DType::F16 => (StateDType::F16, host_bytes::<f16>(data)),
            _ => (StateDType::F32, host_bytes::<f32>(data)),
        };
        Self { name: name.into(), dtype, shape, bytes }
    }

    /// Copies a float tensor whose values are all exact f16 numbers to the host as
    /// [`StateDType::F16`]: the same values in half the bytes of f32 (a cache that holds fp16
    /// metadata in f32 registers sends it at its format's width). A value f16 does not hold exactly
    /// is a [`CacheError::State`]: narrowing never changes what the receiver attends with.
    pub fn from_float_as_f16<B: Backend, const D: usize>(
        name: &str,
        tensor: &Tensor<B, D>,
    ) -> Result<Self, CacheError> {
        let shape = tensor.dims().to_vec();
        let values = host_f32(tensor.clone());
        let narrow = values
            .iter()
            .map(|&x| {
                let h = f16::from_f32(x);
                match h.to_f32().to_bits() == x.to_bits() || (x.is_nan() && h.is_nan()) {
                    true => Ok(h),
                    false => Err(CacheError::State(format!("tensor `{name}`: {x} is not an f16 number"))),
                }
            })
            .collect::<Result<Vec<f16>, _>>()?;
        Ok(Self { name: name.into(), dtype: StateDType::F16, shape, bytes: Bytes::from_owner(PodBytes(narrow)) })
    }

    /// Copies an integer tensor to the host (the host vector becomes the bytes, not copied again).
    pub fn from_int<B: Backend, const D: usize>(name: &str, tensor: &Tensor<B, D, Int>) -> Self {
        Self::from_int_as(name, tensor, StateDType::I32).expect("every integer tensor value fits i32")
    }

    /// Copies an integer tensor to the host as `dtype`, an integer type ([`StateDType::I32`],
    /// [`StateDType::U16`] or [`StateDType::U8`]), so that small integers travel at their storage
    /// width. A value outside `dtype`'s range, or a float `dtype`, is a [`CacheError::State`].
    pub fn from_int_as<B: Backend, const D: usize>(
        name: &str,
        tensor: &Tensor<B, D, Int>,
        dtype: StateDType,
    ) -> Result<Self, CacheError> {
        let shape = tensor.dims().to_vec();
        let values = tensor.to_data().convert::<i32>().into_vec::<i32>().expect("host data of the converted type");
        let bytes = match dtype {
            StateDType::I32 => Bytes::from_owner(PodBytes(values)),
            StateDType::U16 => narrow_ints::<u16>(name, &values, dtype)?,
            StateDType::U8 => narrow_ints::<u8>(name, &values, dtype)?,
            StateDType::F32 | StateDType::F16 => {
                return Err(CacheError::State(format!("tensor `{name}`: {dtype:?} is not an integer type")))
            }
        };
        Ok(Self { name: name.into(), dtype, shape, bytes })
    }

    /// Number of elements the shape implies.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Checks that the byte length matches the shape and dtype.
    pub fn validate(&self) -> Result<(), CacheError> {
        let expected = self.shape.iter().try_fold(self.dtype.size(), |acc, &d| acc.checked_mul(d));
        if expected != Some(self.bytes.len()) {
            return Err(CacheError::State(format!(
                "tensor `{}`: {} bytes for shape {:?} of {:?}",
                self.name,
                self.bytes.len(),
                self.shape,
                self.dtype
            )));
        }
        Ok(())
    }

    /// The shape as `D` dimensions, once the bytes match it and the dtype is one of `dtypes`.
    pub(super) fn check<const D: usize>(&self, dtypes: &[StateDType]) -> Result<[usize; D], CacheError> {
        self.validate()?;
        let shape: [usize; D] = self.shape.clone().try_into().map_err(|_| {
            CacheError::State(format!("tensor `{}` has rank {}, expected {D}", self.name, self.shape.len()))
        })?;
        if !dtypes.contains(&self.dtype) {
            return Err(CacheError::State(format!("tensor `{}` is {:?}, expected {dtypes:?}", self.name, self.dtype)));
        }
        Ok(shape)
    }

    /// The tensor as an f32 tensor of rank `D` on `device` (an [`StateDType::F16`] tensor's values
    /// are exact in f32; the cache that imports it casts it to its own storage).
    pub fn to_float<B: Backend, const D: usize>(&self, device: &B::Device) -> Result<Tensor<B, D>, CacheError> {
        let shape = self.check::<D>(&[StateDType::F32, StateDType::F16])?;
        Ok(match self.dtype {
            StateDType::F16 => {
                let values: Vec<f16> = bytemuck::pod_collect_to_vec(&self.bytes[..]);
                Tensor::from_data(TensorData::new(values, shape).convert::<f32>(), device)
            }
            _ => upload_float::<B, f32, D>(&self.bytes, shape, device),
        })
    }

    /// The tensor as a float tensor of rank `D` and type `dtype` on `device`: f16 bytes into an
    /// f16 tensor are uploaded as they are, anything else goes through [`Self::to_float`] and a
    /// cast. The backend must hold `dtype` tensors.
    pub fn to_float_as<B: Backend, const D: usize>(
        &self,
        device: &B::Device,
        dtype: FloatDType,
    ) -> Result<Tensor<B, D>, CacheError> {
        if self.dtype == StateDType::F16 && dtype == FloatDType::F16 {
            let shape = self.check::<D>(&[StateDType::F16])?;
            return Ok(upload_float::<B, f16, D>(&self.bytes, shape, device));
        }
        Ok(self.to_float::<B, D>(device)?.cast(dtype))
    }

    /// The tensor as an integer tensor of rank `D` on `device` ([`StateDType::U8`] and
    /// [`StateDType::U16`] values widened).
    pub fn to_int<B: Backend, const D: usize>(&self, device: &B::Device) -> Result<Tensor<B, D, Int>, CacheError> {
        let shape = self.check::<D>(&[StateDType::I32, StateDType::U16, StateDType::U8])?;
        let values: Vec<i32> = match self.dtype {
            StateDType::U8 => self.bytes.iter().map(|&b| i32::from(b)).collect(),
            StateDType::U16 => {
                bytemuck::pod_collect_to_vec::<u8, u16>(&self.bytes[..]).into_iter().map(i32::from).collect()
            }
            _ => return Ok(upload_int::<B, D>(&self.bytes, shape, device)),
        };
        Ok(Tensor::from_data(TensorData::new(values, shape), device))
    }
}

/// One layer's cached state: the slots it covers and its named tensors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LayerState {
    /// Cached slots (tokens per sequence, padding included).
    pub tokens: usize,
    /// The tensors, in the order the cache exported them.
    pub tensors: Vec<StateTensor>,
}

impl LayerState {
    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Result<&StateTensor, CacheError> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| CacheError::State(format!("missing tensor `{name}`")))
    }

    /// Total payload bytes.
    pub fn byte_len(&self) -> usize {
        self.tensors.iter().map(|t| t.bytes.len()).sum()
    }
}

/// A cache that can leave its device as a [`LayerState`].
pub trait TransferableCache<B: Backend>: KvCache<B> {
    /// Copies the cached state to the host.
    fn export_state(&self) -> LayerState;
}

/// A scheme whose caches can be rebuilt from a [`LayerState`] (on another device or process).
pub trait TransferableScheme<B: Backend>: KvScheme<B>
where
    Self::Cache: TransferableCache<B>,
{
    /// Rebuilds layer `layer`'s cache of `geometry` from `state` on `device`. A state whose tensors
    /// do not fit the geometry or this scheme's configuration is a [`CacheError::State`].
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<Self::Cache, CacheError>;
}
