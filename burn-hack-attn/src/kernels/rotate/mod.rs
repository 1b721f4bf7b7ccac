//! Queries and keys rotated per KV head: the reference is [`rotate_heads`](crate::rotation::rotate_heads)
//! (Burn's product of the expanded matrices); on CubeCL backends `select` picks the model's
//! rotary kernel without RoPE (`burn_kvcompress::kernels::rotate_heads_kernel`) where it applies.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod select;
