//! Attention over uncompressed K/V: the plain-tensor reference that compressed schemes' kernels
//! are tested against, and the dense caches' implementation ([`dense_attention`]: the reference,
//! or on the CPU backends the host's tiled attention for prompts; [`half_attention`]: over f16
//! keys and values, on tensor cores where the device has them).

use burn::tensor::{activation::softmax, backend::Backend, FloatDType, Tensor, TensorData};

use super::{
    host_attention::{host_attention, HostShape},
    AttendOptions,
};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use crate::backend::as_backend;
use crate::{
    backend::{host_f32, keeps_tensors_on_host},
    error::CacheError,
};

/// Checks query and cached K/V shapes for a GQA attention call and returns
/// `(batch, heads, q_len, head_dim)`.
///
/// `q`: `[batch, heads, q_len, head_dim]`; the cache holds `[batch, kv_heads, total_len, head_dim]`.
pub fn check_attend_shapes(
    q_dims: [usize; 4],
    cache_dims: [usize; 4],
    options: &AttendOptions,
) -> Result<(usize, usize, usize, usize), CacheError> {
    let [batch, heads, q_len, head_dim] = q_dims;
    let [cache_batch, kv_heads, total_len, cache_head_dim] = cache_dims;
    let expected = format!("[{cache_batch}, a multiple of {kv_heads}, 1..={total_len}, {cache_head_dim}]");
    if batch != cache_batch
        || head_dim != cache_head_dim
        || heads == 0
        || heads % kv_heads != 0
        || q_len == 0
        || q_len > total_len
    {
        return Err(CacheError::Shape { what: "queries", expected, found: q_dims.to_vec() });
    }
    if options.key_start.len() != batch {
        return Err(CacheError::Request(format!(
            "key_start has {} rows for a batch of {batch}",
            options.key_start.len()
        )));
    }
    if options.window == Some(0) {
        return Err(CacheError::Request("a sliding window of 0 attends to nothing".into()));
    }
    Ok((batch, heads, q_len, head_dim))
}

/// Scaled-dot-product attention with GQA, causal masking, left padding and an optional sliding
/// window, on plain tensors.
///
/// - `q`: `[batch, heads, q_len, head_dim]`, the queries of the last `q_len` slots;
/// - `k`: `[batch, kv_heads, total_len, head_dim]`;
/// - `v`: `[batch, kv_heads, total_len, value_dim]` (`value_dim` is `head_dim` but for schemes
///   that reduce values and keys to different widths);
/// - returns `[batch, heads, q_len, value_dim]`.
pub fn attention_reference<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let (batch, heads, q_len, head_dim) = check_attend_shapes(q.dims(), k.dims(), options)?;
    let [_, kv_heads, total_len, _] = k.dims();
    let group = heads / kv_heads;
    // Query heads of one KV head are adjacent: fold them into the row dimension.
    let q = q.reshape([batch, kv_heads, group * q_len, head_dim]);
    let scores = q.matmul(k.swap_dims(2, 3)) * options.scale;
    let scores = match options.forbids_nothing(q_len, total_len) {
        true => scores,
        false => {
            let forbidden = options.forbidden_mask::<B>(q_len, total_len, &scores.device());
            let forbidden = forbidden.repeat_dim(2, group).expand([batch, kv_heads, group * q_len, total_len]);
            scores.mask_fill(forbidden, f32::NEG_INFINITY)
        }
    };
    let probs = softmax(scores, 3);
    let value_dim = v.dims()[3];
    Ok(probs.matmul(v).reshape([batch, heads, q_len, value_dim]))
}

/// Attention over uncompressed K/V as [`attention_reference`] computes it (same arguments and
/// shapes), by the fastest way the backend has: on the CPU backends (ndarray, flex), a prompt's
/// queries (`q_len > 1`) go through [`host_attention`] (tiled, multithreaded, no score or mask
/// tensor); a single query, and every other backend, through [`attention_reference`] (on the CPU
/// a decode step's attention is small beside copying the cache to the host).
pub fn dense_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let (batch, heads, q_len, head_dim) = check_attend_shapes(q.dims(), k.dims(), options)?;
    if q_len == 1 || !keeps_tensors_on_host::<B>() {
        return attention_reference(q, k, v, options);
    }
    let [_, kv_heads, total_len, _] = k.dims();
    let value_dim = v.dims()[3];
    let shape = HostShape { batch, heads, kv_heads, q_len, total_len, head_dim, value_dim };
    let device = q.device();
    let out = host_attention(&host_f32(q), &host_f32(k), &host_f32(v), shape, options);
    Ok(Tensor::from_data(TensorData::new(out, [batch, heads, q_len, value_dim]), &device))
}

/// Attention over the first `len` slots of f16 key and value buffers `k`, `v` `[batch,
/// kv_heads, capacity ≥ len, head_dim]` (a [`SlotBuffer`](super::SlotBuffer)'s; otherwise the
/// arguments and shapes of [`attention_reference`], `q` in f32): on the CUDA or wgpu backend of a
/// device with warp matrix instructions, the tensor-core kernel
/// ([`kernels::flash_attention`](crate::kernels::flash_attention), which reads the buffers in
/// place, rounds the queries and the weights to f16 and states its bound), for a prompt and a
/// decode step alike; anything else [`dense_attention`] on the filled slots cast to f32.
pub fn half_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    len: usize,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let [batch, kv_heads, capacity, head_dim] = k.dims();
    if v.dims() != k.dims() {
        let (expected, found) = (format!("{:?}, as the keys'", k.dims()), v.dims().to_vec());
        return Err(CacheError::Shape { what: "value buffer", expected, found });
    }
    if len > capacity {
        return Err(CacheError::Request(format!("{len} filled slots in buffers of {capacity}")));
    }
    check_attend_shapes(q.dims(), [batch, kv_heads, len, head_dim], options)?;
    if let Some(out) = kernel_attention(&q, &k, &v, len, options) {
        return Ok(out);
    }
    let filled = |t: Tensor<B, 4>| t.narrow(2, 0, len).cast(FloatDType::F32);
    dense_attention(q, filled(k), filled(v), options)
}

/// The tensor-core attention where `B` is one of the crate's CubeCL backends and the kernel
/// applies to these operands on this device.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn kernel_attention<B: Backend>(
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
    len: usize,
    options: &AttendOptions,
) -> Option<Tensor<B, 4>> {
    let out = None;
    #[cfg(feature = "cuda")]
    let out =
        out.or_else(|| on_backend::<B, crate::backend::Cuda>(q, k, v, len, options, crate::kernels::flash_attention));
    #[cfg(feature = "wgpu")]
    let out =
        out.or_else(|| on_backend::<B, crate::backend::Wgpu>(q, k, v, len, options, crate::kernels::flash_attention));
    out
}

/// An attention kernel written for backend `C` (queries, key and value buffers, filled slots,
/// options); `None` where it does not apply.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
type KernelAttention<C> = fn(Tensor<C, 4>, Tensor<C, 4>, Tensor<C, 4>, usize, &AttendOptions) -> Option<Tensor<C, 4>>;

/// Attention of the operands by `kernel`, written for backend `C`, where `B` is `C`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn on_backend<B: Backend, C: Backend>(
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
    len: usize,
    options: &AttendOptions,
    kernel: KernelAttention<C>,
) -> Option<Tensor<B, 4>> {
    let cast = |t: &Tensor<B, 4>| as_backend::<B, C, 4>(t.clone()).ok();
    let out = kernel(cast(q)?, cast(k)?, cast(v)?, len, options)?;
    as_backend(out).ok()
}

/// No CubeCL backend in this build: never a kernel.
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn kernel_attention<B: Backend>(
    _q: &Tensor<B, 4>,
    _k: &Tensor<B, 4>,
    _v: &Tensor<B, 4>,
    _len: usize,
    _options: &AttendOptions,
) -> Option<Tensor<B, 4>> {
    None
}
