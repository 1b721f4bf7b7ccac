//! One layer's HACK cache: the rotation of its queries and keys, and the store of its
//! [axes](crate::Axes).

use burn::tensor::{DType, FloatDType, Tensor};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};

use super::{key_partitions_fit, ChannelStore, PaperStore};
use crate::{
    kernels::{CacheView, ChannelView, HackBackend},
    Axes, HackConfig,
};

/// Where a HACK cache keeps its K/V: the paper's layout or the channel layout.
#[derive(Debug, Clone)]
pub enum Store<B: HackBackend> {
    /// [`Axes::Paper`].
    Paper(PaperStore<B>),
    /// [`Axes::Channel`].
    Channel(ChannelStore<B>),
}

/// One layer's compressed K/V for a batch.
#[derive(Debug, Clone)]
pub struct HackCache<B: HackBackend> {
    pub(super) config: HackConfig,
    pub(super) layer: usize,
    pub(super) geometry: CacheGeometry,
    /// `[kv_heads, head_dim, head_dim]`: the rotation of queries and keys (None without one), or
    /// why the scheme could not build it.
    pub(super) rotation: Result<Option<Tensor<B, 3>>, String>,
    pub(super) store: Store<B>,
}

impl<B: HackBackend> HackCache<B> {
    /// An empty cache on `device` for layer `layer` (which seeds its stochastic rounding) with the
    /// query/key rotation `rotation: [kv_heads, head_dim, head_dim]`, if any (or why it could not
    /// be built). A configuration, geometry or rotation HACK cannot run (see
    /// [`HackCache::check_supported`]) fails at the first append.
    pub fn new(
        config: HackConfig,
        layer: usize,
        geometry: CacheGeometry,
        rotation: Result<Option<Tensor<B, 3>>, String>,
        device: &B::Device,
    ) -> Self {
        let store = match config.axes {
            Axes::Paper => Store::Paper(PaperStore::new(geometry.head_dim)),
            Axes::Channel => Store::Channel(ChannelStore::new(device)),
        };
        Self { config, layer, geometry, rotation, store }
    }

    /// Checks the configuration, that the head dimension is a multiple of 16 and of Π (or
    /// smaller than Π), and that the rotation has the cache's shape.
    pub fn check_supported(&self) -> Result<(), CacheError> {
        self.config.validate().map_err(|e| CacheError::Unsupported(e.to_string()))?;
        let d = self.geometry.head_dim;
        if !key_partitions_fit(d, self.config.partition) {
            return Err(CacheError::Unsupported(format!(
                "HACK needs a head dimension that is a multiple of 16 and of Π (or smaller than Π); got {d} with Π = {}",
                self.config.partition
            )));
        }
        let rotation = self.rotation.as_ref().map_err(|e| CacheError::Unsupported(e.clone()))?;
        if let Some(r) = rotation {
            if r.dims() != [self.geometry.kv_heads, d, d] {
                return Err(CacheError::Unsupported(format!(
                    "rotations of shape {:?} for {} KV heads of {d} channels",
                    r.dims(),
                    self.geometry.kv_heads
                )));
            }
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &HackConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Store<B> {
        &self.store
    }

    /// Closed (quantized) blocks.
    pub fn blocks(&self) -> usize {
        match &self.store {
            Store::Paper(s) => s.blocks(),
            Store::Channel(s) => s.blocks(self.geometry.head_dim),
        }
    }

    /// Slots in float at the end (values only on the paper's axes, keys and values on the
    /// channel axes).
    pub fn tail_len(&self) -> usize {
        match &self.store {
            Store::Paper(s) => s.len() - self.blocks() * self.config.partition,
            Store::Channel(s) => s.tail_len(),
        }
    }

    /// What attention reads on the paper's axes (None while empty or on the channel axes).
    pub fn view(&self) -> Option<CacheView<'_, B>> {
        match &self.store {
            Store::Paper(s) => s.view(&self.config, self.geometry.head_dim),
            Store::Channel(_) => None,
        }
    }

    /// What attention reads on the channel axes (None on the paper's axes).
    pub fn channel_view(&self) -> Option<ChannelView<'_, B>> {
        match &self.store {
            Store::Paper(_) => None,
            Store::Channel(s) => Some(s.view(&self.config, self.geometry)),
        }
    }

    /// Quantizes the blocks the channel layout holds in float only because no append has come
    /// since they left the window (a prefill's), as the next append would; the state a prefill
    /// side exports is the one its decode steps would attend.
    pub fn close_blocks(&mut self) -> Result<(), CacheError> {
        match &mut self.store {
            Store::Paper(_) => Ok(()),
            Store::Channel(s) => s.close_blocks(&self.config, self.layer, self.geometry),
        }
    }

    /// Queries or keys `x: [batch, heads or kv_heads, slots, head_dim]` rotated per KV head as this
    /// cache rotates them before attention and quantization (unchanged without rotation): what
    /// the attention references take to reproduce [`KvCache::attend`] on this device's rounding.
    pub fn rotated(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.rotated_as(x, DType::F32)
    }

    /// Appends rotated keys in the store's input type and values to the store, the cache and
    /// the shapes already checked (by [`KvCache::append`] or [`KvCache::append_rotated`]).
    fn store_checked(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        let (config, layer, geometry) = (&self.config, self.layer, self.geometry);
        match &mut self.store {
            Store::Paper(s) => s.append(config, layer, k, v),
            Store::Channel(s) => s.append(config, layer, geometry, k, v),
        }
    }

    /// [`Self::rotated`] in `dtype` (the product's f32 sums rounded once).
    fn rotated_as(&self, x: Tensor<B, 4>, dtype: DType) -> Tensor<B, 4> {
        match &self.rotation {
            Ok(Some(r)) => B::hack_rotate(x, r, dtype),
            _ => x.cast(dtype),
        }
    }
}

impl<B: HackBackend> KvCache<B> for HackCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_supported()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        // Keys reach the store in the type it takes: the rotation's f32 sums rounded once.
        let k = self.rotated_as(k, self.input_dtype().into());
        self.store_checked(k, v)
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.attend_rotated(self.rotated(q), options)
    }

    fn key_rotation(&self) -> Option<Tensor<B, 3>> {
        self.rotation.as_ref().ok().cloned().flatten()
    }

    fn append_rotated(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_supported()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        self.store_checked(k.cast(self.input_dtype()), v)
    }

    fn attend_rotated(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        match &self.store {
            Store::Paper(s) => s.attend(&self.config, self.geometry.head_dim, q, options),
            Store::Channel(s) => s.attend(&self.config, self.geometry, q, options),
        }
    }

    fn len(&self) -> usize {
        match &self.store {
            Store::Paper(s) => s.len(),
            Store::Channel(s) => s.len,
        }
    }

    /// The channel layout's float slots' type where it is f16 (an f16 model's values then come
    /// without a cast, its keys with one); f32 otherwise.
    fn input_dtype(&self) -> FloatDType {
        match &self.store {
            Store::Channel(s) if s.float_dtype == DType::F16 => FloatDType::F16,
            _ => FloatDType::F32,
        }
    }

    /// Bytes of the storage format, what
    /// [`export_state`](burn_kvcompress::cache::TransferableCache::export_state) sends (tested).
    /// Paper's axes: packed codes, fp16 min/scale and sums at their storage width (u8 or u16) for
    /// keys and closed value blocks, plus the tail at f32; the device keeps sums as 32-bit
    /// integers. Channel axes: packed codes and fp16 min/scale, float slots at f16.
    fn memory_bytes(&self) -> usize {
        match &self.store {
            Store::Paper(s) => s.memory_bytes(&self.config, self.geometry),
            Store::Channel(s) => s.memory_bytes(&self.config, self.geometry),
        }
    }
}
