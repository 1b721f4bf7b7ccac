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

/// Where a product step reads packed key or value rows: a cache's array or a warp's stage.
pub(super) trait WordList: CubeIndex<Output = Words, Idx = usize> {}
impl<L: CubeIndex<Output = Words, Idx = usize>> WordList for L {}

/// Where a product step reads key or value metadata words: a cache's array or a warp's stage.
pub(super) trait ParamList: CubeIndex<Output = u32, Idx = usize> {}
impl<L: CubeIndex<Output = u32, Idx = usize>> ParamList for L {}

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

/// The lane's rows of a product's first operand: rows `row` and `row + 8` of block `first`'s
/// rows, then (`paired`) the same rows of block `second`'s, each `4 · vectors` packed words from
/// vector `row · vectors` of `words` (`first` and `second` are the blocks' first rows).
#[cube]
pub(super) fn product_rows<W: WordList>(
    words: &W,
    first: u32,
    second: u32,
    row: u32,
    #[comptime] vectors: u32,
    #[comptime] paired: bool,
) -> Array<u32> {
    let blocks = comptime!(if paired { 2u32 } else { 1u32 });
    let mut out = Array::<u32>::new(comptime!((blocks * 8 * vectors) as usize));
    #[unroll]
    for block in 0..blocks {
        let base = select(block == 0u32, first, second);
        #[unroll]
        for r in 0..2u32 {
            #[unroll]
            for v in 0..vectors {
                let four = words[((base + row + 8 * r) * vectors + v) as usize];
                #[unroll]
                for w in 0..4u32 {
                    out[comptime!((((2 * block + r) * vectors + v) * 4 + w) as usize)] = four[w as usize];
                }
            }
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

/// Lane `4g + t`'s first operand of k-step `step` of a product over `rows` ([`product_rows`] of
/// `vectors` vectors a row): registers `r` for row `g + 8 (r mod 2)`, depth half `r / 2`. A half
/// is 16 codes of the rows: `paired`, half `h` is codes `16 · step ..` of block `h`'s rows (the
/// two blocks side by side in the depth); otherwise codes `32 · step + 16h ..` of the one block's.
#[cube]
pub(super) fn pair_operand(
    rows: &Array<u32>,
    #[comptime] step: u32,
    t: u32,
    #[comptime] vectors: u32,
    #[comptime] bits: u32,
    #[comptime] paired: bool,
) -> Array<Codes> {
    // 16-code chunks of a row.
    let chunks = comptime!(8 * vectors / bits);
    let mut a = Array::<Codes>::new(4usize);
    #[unroll]
    for reg in 0..4u32 {
        let row = comptime!(if paired { reg } else { reg % 2 });
        let chunk = comptime!(if paired { step } else { 2 * step + reg / 2 });
        a[reg as usize] = lifted_half(rows, comptime!(row * chunks + chunk), t, bits);
    }
    a
}

/// Lane `4g + t`'s second operand of k-step `step` from its column's 16-code registers `codes`
/// (from register `first`): `paired`, the register of chunk `step` in the half of the lane's block
/// `side` and zeros in the other (the column sees only its own block's half of the depth);
/// otherwise chunks `2 · step` and `2 · step + 1`.
#[cube]
pub(super) fn column_operand(
    codes: &Array<u32>,
    #[comptime] first: u32,
    #[comptime] step: u32,
    side: u32,
    #[comptime] paired: bool,
) -> Array<u32> {
    let mut b = Array::<u32>::new(2usize);
    if comptime!(paired) {
        let own = codes[comptime!((first + step) as usize)];
        b[0] = select(side == 0u32, own, 0u32);
        b[1] = select(side == 1u32, own, 0u32);
    } else {
        b[0] = codes[comptime!((first + 2 * step) as usize)];
        b[1] = codes[comptime!((first + 2 * step + 1) as usize)];
    }
    b
}
