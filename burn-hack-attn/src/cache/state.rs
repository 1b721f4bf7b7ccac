//! A HACK cache as a [`LayerState`] and back: the codes, metadata, sums and float slots exactly as
//! held, so a cache rebuilt on the decode side attends exactly as the prefill side's.
//!
//! The paper's axes: `k_words`, `k_params`, `k_sums` (keys, one row per slot); `v_words`,
//! `v_params`, `v_sums` (closed blocks, present once a block has closed); `v_tail` (present while
//! the tail is not empty). Shapes as in [`Codes`]. The state holds the format's widths, which
//! [`HackCache`]'s `memory_bytes` counts: packed words and each partition's fp16 (min, scale) word
//! as 32-bit integers, code sums as `u8` or `u16` ([`sum_bytes`]; the device holds them as 32-bit
//! integers), the tail in f32.
//!
//! The channel axes: `sinks_k`, `sinks_v`, `tail_k`, `tail_v` (f16, `[batch, kv_heads, slots,
//! head_dim]`, present when not empty); `k_slot_words` (a row per closed slot), `k_params` (a row
//! per block and channel), `v_channel_words` (a row per block and channel), `v_params` (a row per
//! closed slot), present once a block has closed (see [`PackedRows`]). The format's
//! settings travel in the scheme's name, which both sides compare before anything is sent.

use burn_kvcompress::{
    cache::{
        CacheGeometry, DeviceState, KvCache, KvScheme, LayerState, StateDType, StateTensor, TransferableCache,
        TransferableScheme,
    },
    error::CacheError,
};

use super::{
    sum_bytes, value_group, ChannelStore, Codes, FloatSlots, HackCache, HackScheme, PackedRows, PaperStore, Store,
};
use crate::{kernels::HackBackend, HackConfig};

/// The state name of the channel layout's packed `x` codes (`k` or `v`): named by their rows
/// (`PackedRows`), so that a state of the same shapes with another packing cannot be read as
/// this one.
fn channel_words_name(x: &str) -> &'static str {
    if x == "k" {
        "k_slot_words"
    } else {
        "v_channel_words"
    }
}

/// Appends `codes` of `bits`-bit codes to `out` as `{prefix}_words`, `{prefix}_params` and
/// `{prefix}_sums` (at the width [`sum_bytes`] gives their partitions).
pub(super) fn export_codes<B: HackBackend>(prefix: &str, codes: &Codes<B>, bits: u8, out: &mut Vec<StateTensor>) {
    let (words, parts) = (codes.words.dims()[3], codes.sums.dims()[3]);
    let group = words * 32 / (bits as usize * parts);
    let sums = match sum_bytes(bits, group) {
        1 => StateDType::U8,
        _ => StateDType::U16,
    };
    out.push(StateTensor::from_int(&format!("{prefix}_words"), &codes.words));
    out.push(StateTensor::from_int(&format!("{prefix}_params"), &codes.params));
    out.push(
        StateTensor::from_int_as(&format!("{prefix}_sums"), &codes.sums, sums)
            .expect("a partition's code sum fits the width sum_bytes gives it"),
    );
}

/// Reads the codes [`export_codes`] wrote under `prefix`, checking that they hold `rows` rows of
/// `words` packed words and `parts` partitions for `geometry`'s batch and KV heads.
pub(super) fn import_codes<B: HackBackend>(
    prefix: &str,
    state: &DeviceState<B>,
    rows: usize,
    words: usize,
    parts: usize,
    geometry: CacheGeometry,
) -> Result<Codes<B>, CacheError> {
    let get = |name: &str| state.to_int::<4>(&format!("{prefix}_{name}"));
    let codes = Codes { words: get("words")?, params: get("params")?, sums: get("sums")? };
    let (b, h) = (geometry.batch, geometry.kv_heads);
    let expected = ([b, h, rows, words], [b, h, rows, parts]);
    let found = (codes.words.dims(), [codes.params.dims(), codes.sums.dims()]);
    if found.0 != expected.0 || found.1.iter().any(|d| *d != expected.1) {
        return Err(CacheError::State(format!(
            "`{prefix}` codes have shapes {:?} / {:?}, expected {:?} / {:?}",
            found.0, found.1, expected.0, expected.1
        )));
    }
    Ok(codes)
}

impl<B: HackBackend> TransferableCache<B> for HackCache<B> {
    /// The state as [`memory_bytes`](burn_kvcompress::cache::KvCache::memory_bytes) counts it. On
    /// the channel axes, blocks that the next append would close are exported closed (what the
    /// decode side will attend); should quantizing them fail (a non-finite value), they are sent
    /// in float, for the receiver's next append to report.
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        match &self.store {
            Store::Paper(s) => s.export(&self.config, &mut tensors),
            Store::Channel(s) => {
                let mut sealed = s.clone();
                let s = match sealed.close_blocks(&self.config, self.layer, self.geometry) {
                    Ok(()) => &sealed,
                    Err(_) => s,
                };
                for (name, slots) in [("sinks", &s.sinks), ("tail", &s.tail)] {
                    if let Some(slots) = slots {
                        for (x, t) in [("k", &slots.k), ("v", &slots.v)] {
                            let exact = StateTensor::from_float_as_f16(&format!("{name}_{x}"), &t.filled());
                            tensors.push(exact.expect("float slots hold f16 values"));
                        }
                    }
                }
                for (x, rows) in [("k", &s.keys), ("v", &s.values)] {
                    if let Some(rows) = rows {
                        tensors.push(StateTensor::from_int(channel_words_name(x), &rows.words));
                        tensors.push(StateTensor::from_int(&format!("{x}_params"), &rows.params));
                    }
                }
            }
        }
        LayerState { tokens: self.len(), tensors }
    }
}

impl<B: HackBackend> TransferableScheme<B> for HackScheme {
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<HackCache<B>, CacheError> {
        let mut cache: HackCache<B> = self.new_cache(layer, geometry, device);
        cache.check_supported()?;
        let (config, state) = (self.config(), state.upload::<B>(device));
        match &mut cache.store {
            Store::Paper(s) => *s = PaperStore::import(config, geometry, &state)?,
            Store::Channel(s) => import_channel(s, config, geometry, &state)?,
        }
        Ok(cache)
    }
}

/// Reads the channel layout's tensors: their shapes must add up to `state.tokens` slots.
fn import_channel<B: HackBackend>(
    s: &mut ChannelStore<B>,
    config: &HackConfig,
    geometry: CacheGeometry,
    state: &DeviceState<B>,
) -> Result<(), CacheError> {
    let (b, h, d, pi) = (geometry.batch, geometry.kv_heads, geometry.head_dim, config.partition);
    let len = state.state().tokens;
    let present = |name: &str| state.state().tensors.iter().any(|t| t.name == name);
    let float_dtype = s.float_dtype;
    let slots = |name: &str| -> Result<Option<FloatSlots<B>>, CacheError> {
        if !present(&format!("{name}_k")) {
            return Ok(None);
        }
        // f16 slots into an f16 cache are uploaded as they are; other pairs are cast.
        let [k, v] = ["k", "v"].map(|x| state.to_float_as::<4>(&format!("{name}_{x}"), float_dtype.into()));
        let (k, v) = (k?, v?);
        let n = k.dims()[2];
        if k.dims() != [b, h, n, d] || v.dims() != k.dims() || n == 0 {
            return Err(CacheError::State(format!("`{name}` slots have shapes {:?} / {:?}", k.dims(), v.dims())));
        }
        Ok(Some(FloatSlots::new(k, v)))
    };
    s.sinks = slots("sinks")?;
    s.tail = slots("tail")?;
    let blocks = match present("k_params") {
        true => state.state().get("k_params")?.shape.get(2).copied().unwrap_or(0) / d,
        false => 0,
    };
    if blocks > 0 {
        let rows = |prefix: &str, words: [usize; 2], params: [usize; 2]| -> Result<PackedRows<B>, CacheError> {
            let words_t = state.to_int::<4>(channel_words_name(prefix))?;
            let params_t = state.to_int::<4>(&format!("{prefix}_params"))?;
            let (words, params) = ([b, h, words[0], words[1]], [b, h, params[0], params[1]]);
            if words_t.dims() != words || params_t.dims() != params {
                return Err(CacheError::State(format!(
                    "`{prefix}` codes have shapes {:?} / {:?}, expected {words:?} / {params:?}",
                    words_t.dims(),
                    params_t.dims(),
                )));
            }
            Ok(PackedRows { words: words_t, params: params_t })
        };
        let (kb, vb) = (config.key_bits as usize, config.value_bits as usize);
        s.keys = Some(rows("k", [blocks * pi, d * kb / 32], [blocks * d, 1])?);
        s.values = Some(rows("v", [blocks * d, pi * vb / 32], [blocks * pi, d / value_group(d, pi)])?);
    }
    let (sinks, tail) = (s.sinks_len(), s.tail_len());
    let sinks_expected = config.sinks.min(len);
    if sinks != sinks_expected || sinks + blocks * pi + tail != len || (tail > 0 && sinks < config.sinks) {
        return Err(CacheError::State(format!(
            "{sinks} sink slots, {blocks} blocks of {pi} and {tail} tail slots do not make {len} slots with {} sinks",
            config.sinks
        )));
    }
    s.len = len;
    Ok(())
}
