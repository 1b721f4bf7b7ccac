//! The tensor-core channel kernel's operand registers and warp reductions: how lane `4g + t`
//! builds an operand register from packed words ([`lifted_half`], [`position`]) and reduces over
//! its column of lanes (the quad reductions and the 2-bit lift are `kernels/warp_codes.rs`', shared
//! with the paper layout's kernel). See [`super::mma_kernel`] for the layout.

use cubecl::prelude::*;

use crate::kernels::warp_codes::{lifted_codes, LIFT};

/// An operand register of four byte codes (key or value codes, lifted; weight codes).
pub(super) type Codes = Vector<u8, Const<4>>;
/// An operand register of four signed query codes.
pub(super) type QueryCodes = Vector<i8, Const<4>>;
/// Half an accumulator fragment: two `i32` dot products.
pub(super) type Dots = Vector<i32, Const<2>>;
/// Four packed words, the width of one load.
pub(super) type Words = Vector<u32, Const<4>>;

/// Rows of a warp product.
pub const PRODUCT_ROWS: u32 = 16;
/// Columns of a warp product: query heads, padded.
pub const PRODUCT_COLUMNS: u32 = 8;
/// Depth of a warp product.
pub const PRODUCT_DEPTH: u32 = 32;
/// Codes of a 16-deep half of a product's depth.
pub(super) const HALF: u32 = 16;

/// The lift of `bits`-bit codes: what an operand register's byte holds per unit of code.
pub(super) fn lift(bits: u32) -> u32 {
    if bits == 2 {
        LIFT
    } else {
        16
    }
}

/// The position among a half's 16 codes that lane `4g + t`'s byte `b` holds for `bits`-bit codes:
/// `4b + t` (2-bit), `8 (t / 2) + 2b + t mod 2` (4-bit).
#[cube]
pub(super) fn position(t: u32, #[comptime] b: u32, #[comptime] bits: u32) -> u32 {
    if comptime!(bits == 2) {
        4 * b + t
    } else {
        8 * (t / 2) + 2 * b + t % 2
    }
}

/// The row of `4 · vectors` packed words at vector `row · vectors` of `words`.
#[cube]
pub(super) fn row_words(words: &Array<Words>, row: u32, #[comptime] vectors: u32) -> Array<u32> {
    let mut out = Array::<u32>::new(comptime!((4 * vectors) as usize));
    #[unroll]
    for v in 0..vectors {
        let four = words[(row * vectors + v) as usize];
        #[unroll]
        for w in 0..4u32 {
            out[(4 * v + w) as usize] = four[w as usize];
        }
    }
    out
}

/// Lane `4g + t`'s operand register of half `half` of `row` (16 codes from position `16 · half`),
/// each code times [`lift`]`(bits)`.
#[cube]
pub(super) fn lifted_half(row: &Array<u32>, #[comptime] half: u32, t: u32, #[comptime] bits: u32) -> Codes {
    if comptime!(bits == 2) {
        lifted_codes(row[half as usize], LIFT >> (2 * t))
    } else {
        let word = select(t >= 2, row[comptime!(2 * half + 1) as usize], row[comptime!(2 * half) as usize]);
        Codes::reinterpret((word * select((t & 1) == 0, 16u32, 1u32)) & 0xF0F0_F0F0u32)
    }
}

/// Max over the lanes of the caller's `t` (`t, 4 + t, …, 28 + t`).
#[cube]
pub(super) fn column_max(v: f32) -> f32 {
    let v = f32::max(v, plane_shuffle_xor(v, 4));
    let v = f32::max(v, plane_shuffle_xor(v, 8));
    f32::max(v, plane_shuffle_xor(v, 16))
}

/// Sum over the lanes of the caller's `t`.
#[cube]
pub(super) fn column_sum(v: f32) -> f32 {
    let v = v + plane_shuffle_xor(v, 4);
    let v = v + plane_shuffle_xor(v, 8);
    v + plane_shuffle_xor(v, 16)
}

/// A quantity of head `g` (held by quad `g`) as seen by lane `4g + t` for its heads `2t + e`.
#[cube]
pub(super) fn heads_of_lane(v: f32, t: u32) -> Array<f32> {
    let mut out = Array::<f32>::new(2usize);
    out[0] = plane_shuffle(v, 8 * t);
    out[1] = plane_shuffle(v, 8 * t + 4);
    out
}

/// Lane `4g + t`'s first operand of k-step `step` of a product whose rows `g` and `g + 8` are
/// `upper` and `lower` (rows of packed `bits`-bit codes): registers `r` for row `g + 8 (r mod
/// 2)`, depth half `r / 2`.
#[cube]
pub(super) fn row_pair_operand(
    upper: &Array<u32>,
    lower: &Array<u32>,
    #[comptime] step: u32,
    t: u32,
    #[comptime] bits: u32,
) -> Array<Codes> {
    let mut a = Array::<Codes>::new(4usize);
    a[0] = lifted_half(upper, comptime!(2 * step), t, bits);
    a[1] = lifted_half(lower, comptime!(2 * step), t, bits);
    a[2] = lifted_half(upper, comptime!(2 * step + 1), t, bits);
    a[3] = lifted_half(lower, comptime!(2 * step + 1), t, bits);
    a
}
