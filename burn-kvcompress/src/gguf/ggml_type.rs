//! ggml tensor element types: numeric ids, block sizes and bytes per block.

use std::fmt;

use super::error::GgufError;

/// Elements per super-block of the k-quant types.
pub const QK_K: usize = 256;

/// A ggml tensor type, with the numeric id that GGUF stores (`enum ggml_type` in ggml.h).
///
/// Ids 4, 5, 31..=33 and 36..=38 belonged to removed types and are rejected as unknown.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32 = 0,
    /// 16-bit IEEE float.
    F16 = 1,
    /// 4-bit, 32-element blocks, f16 scale.
    Q4_0 = 2,
    /// 4-bit, 32-element blocks, f16 scale and minimum.
    Q4_1 = 3,
    /// 5-bit, 32-element blocks, f16 scale.
    Q5_0 = 6,
    /// 5-bit, 32-element blocks, f16 scale and minimum.
    Q5_1 = 7,
    /// 8-bit, 32-element blocks, f16 scale.
    Q8_0 = 8,
    /// 8-bit, 32-element blocks, f32 scale and sum (an intermediate type).
    Q8_1 = 9,
    /// 2-bit k-quant.
    Q2_K = 10,
    /// 3-bit k-quant.
    Q3_K = 11,
    /// 4-bit k-quant, 256-element super-blocks of eight 32-element sub-blocks.
    Q4_K = 12,
    /// 5-bit k-quant.
    Q5_K = 13,
    /// 6-bit k-quant, 256-element super-blocks of sixteen 16-element sub-blocks.
    Q6_K = 14,
    /// 8-bit k-quant (an intermediate type).
    Q8_K = 15,
    /// i-quant 2.06 bpw.
    IQ2_XXS = 16,
    /// i-quant 2.31 bpw.
    IQ2_XS = 17,
    /// i-quant 3.06 bpw.
    IQ3_XXS = 18,
    /// i-quant 1.56 bpw.
    IQ1_S = 19,
    /// 4-bit non-linear.
    IQ4_NL = 20,
    /// i-quant 3.44 bpw.
    IQ3_S = 21,
    /// i-quant 2.5 bpw.
    IQ2_S = 22,
    /// i-quant 4.25 bpw.
    IQ4_XS = 23,
    /// 8-bit integer.
    I8 = 24,
    /// 16-bit integer.
    I16 = 25,
    /// 32-bit integer.
    I32 = 26,
    /// 64-bit integer.
    I64 = 27,
    /// 64-bit IEEE float.
    F64 = 28,
    /// i-quant 1.75 bpw.
    IQ1_M = 29,
    /// bfloat16.
    BF16 = 30,
    /// ternary 1.69 bpw.
    TQ1_0 = 34,
    /// ternary 2.06 bpw.
    TQ2_0 = 35,
    /// microscaling FP4.
    MXFP4 = 39,
    /// NVIDIA FP4.
    NVFP4 = 40,
    /// 1-bit.
    Q1_0 = 41,
}

impl GgmlType {
    /// Every known type, in id order.
    pub const ALL: [GgmlType; 34] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
        Self::NVFP4,
        Self::Q1_0,
    ];

    /// The type with ggml id `id`, or [`GgufError::UnknownTensorType`].
    pub fn from_id(id: u32) -> Result<Self, GgufError> {
        Self::ALL.iter().copied().find(|t| *t as u32 == id).ok_or(GgufError::UnknownTensorType(id))
    }

    /// The ggml numeric id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Elements per block (1 for the plain float and integer types).
    pub fn block_size(self) -> usize {
        self.traits().0
    }

    /// Bytes per block (`ggml_type_size`).
    pub fn type_size(self) -> usize {
        self.traits().1
    }

    /// ggml's name for the type (`ggml_type_name`, upper case as in gguf-py).
    pub fn name(self) -> &'static str {
        self.traits().2
    }

    /// Bytes taken by `n_elements` elements, or `None` if `n_elements` is not a whole number of
    /// blocks or the byte count overflows.
    pub fn byte_size(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }

    /// (block size, type size, name), as in ggml's `type_traits` and gguf-py's `GGML_QUANT_SIZES`.
    fn traits(self) -> (usize, usize, &'static str) {
        use GgmlType::*;
        match self {
            F32 => (1, 4, "F32"),
            F16 => (1, 2, "F16"),
            Q4_0 => (32, 2 + 16, "Q4_0"),
            Q4_1 => (32, 2 + 2 + 16, "Q4_1"),
            Q5_0 => (32, 2 + 4 + 16, "Q5_0"),
            Q5_1 => (32, 2 + 2 + 4 + 16, "Q5_1"),
            Q8_0 => (32, 2 + 32, "Q8_0"),
            Q8_1 => (32, 4 + 4 + 32, "Q8_1"),
            Q2_K => (QK_K, 2 + 2 + QK_K / 16 + QK_K / 4, "Q2_K"),
            Q3_K => (QK_K, 2 + QK_K / 4 + QK_K / 8 + 12, "Q3_K"),
            Q4_K => (QK_K, 2 + 2 + QK_K / 2 + 12, "Q4_K"),
            Q5_K => (QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12, "Q5_K"),
            Q6_K => (QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, "Q6_K"),
            Q8_K => (QK_K, 4 + QK_K + QK_K / 8, "Q8_K"),
            IQ2_XXS => (QK_K, 2 + QK_K / 4, "IQ2_XXS"),
            IQ2_XS => (QK_K, 2 + QK_K / 4 + QK_K / 32, "IQ2_XS"),
            IQ3_XXS => (QK_K, 2 + QK_K / 4 + QK_K / 8, "IQ3_XXS"),
            IQ1_S => (QK_K, 2 + QK_K / 8 + QK_K / 16, "IQ1_S"),
            IQ4_NL => (32, 2 + 16, "IQ4_NL"),
            IQ3_S => (QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, "IQ3_S"),
            IQ2_S => (QK_K, 2 + QK_K / 4 + QK_K / 16, "IQ2_S"),
            IQ4_XS => (QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, "IQ4_XS"),
            I8 => (1, 1, "I8"),
            I16 => (1, 2, "I16"),
            I32 => (1, 4, "I32"),
            I64 => (1, 8, "I64"),
            F64 => (1, 8, "F64"),
            IQ1_M => (QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, "IQ1_M"),
            BF16 => (1, 2, "BF16"),
            TQ1_0 => (QK_K, 2 + 4 * 13, "TQ1_0"),
            TQ2_0 => (QK_K, 2 + 64, "TQ2_0"),
            MXFP4 => (32, 1 + 16, "MXFP4"),
            NVFP4 => (64, 4 + 32, "NVFP4"),
            Q1_0 => (128, 2 + 16, "Q1_0"),
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
