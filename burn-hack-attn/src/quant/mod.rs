//! Asymmetric min/max quantization per partition, fp16 metadata, and bit-packing.

mod group;
mod groups;
mod matrix;
mod noise;
mod pack;
mod params_word;

pub use group::{
    dequantize_group, quantize_group, quantize_group_clipped, GroupParams, QuantError, Rounder, CLIP_RATIOS,
};
pub(crate) use groups::GroupTable;
pub use matrix::PartitionedMatrix;
pub use noise::{mix32, uniform};
pub use pack::{pack_codes, unpack_codes};
pub use params_word::{word_minima, word_scales};
