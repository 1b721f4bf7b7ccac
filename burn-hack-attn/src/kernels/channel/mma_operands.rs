//! The tensor-core channel kernel's operand registers and warp reductions: which words of a
//! block's packed rows lane `4g + t` takes ([`product_rows`]), how it masks one field of them into
//! an operand register ([`row_operand`], [`PackedDepth`]), the depth positions its second operand
//! holds ([`PackedDepth::position`]) and its reductions over a column of lanes. See
//! [`super::mma_kernel`] for the layout.

use cubecl::{cmma::MmaDefinition, prelude::*};

/// An operand register of four byte codes: key or value codes (one field of a word), weight
/// codes (`u8`), query codes (`i8`).
pub(super) type Codes<B> = Vector<B, Const<4>>;
/// Half an accumulator fragment: two `i32` dot products.
pub(super) type Dots = Vector<i32, Const<2>>;

/// Where a product step reads packed words (key or value rows) or metadata words: a cache's
/// array or a warp's stage.
pub(super) trait WordList: CubeIndex<Output = u32, Idx = usize> {}
impl<L: CubeIndex<Output = u32, Idx = usize>> WordList for L {}

/// Rows of a warp product.
pub const PRODUCT_ROWS: u32 = 16;
/// Columns of a warp product: query heads, padded.
pub const PRODUCT_COLUMNS: u32 = 8;
/// Depth of a warp product.
pub const PRODUCT_DEPTH: u32 = 32;
/// Lanes of a column of a warp product's fragments (`t` of lane `4g + t`).
const QUAD: u32 = 4;

/// How a block's packed rows enter a product's depth: key rows (rows of slots, depth over
/// channels) or value rows (rows of channels, depth over slots), `bits`-bit codes, `row_words`
/// words a row (a multiple of 4), one block or (`paired`) two side by side.
///
/// A word holds `32 / bits` codes, `fields = 8 / bits` to a byte: byte `b`'s field `f` is the
/// word's code `fields · b + f`. Lane `4g + t` takes words `4j + t` of each row (`j < row_words /
/// 4`), and a product's register of it is one field of one word under one mask, `word & (mask ≪
/// bits · f)`: its four bytes are codes `fields · b + f`, each `2^(bits · f)` times its code.
/// Every lane takes the same field in a product, so a product's terms share one weight. Each
/// field of a row tile sums in its own accumulators (`field_dots`), so that a tile's products
/// form `fields` independent chains rather than one, and the fields are joined at the end by
/// Horner's rule, times `2^bits` before each next field (`join_fields`): every term then weighs
/// `2^(bits · (fields − 1))` = [`Self::lift`] (64 for 2-bit codes, 16 for 4-bit), undone in the
/// corrections.
/// The second operand's byte `b` of the register of word `j`, field `f` is the query (or weight)
/// at the code's position ([`Self::position`]): a dot product does not depend on the order of its
/// terms, so the two operands only have to agree.
///
/// Paired, a product's depth halves are the two blocks, each the same word and field; otherwise
/// the halves are two words of the one block (`row_words ≥ 8`; the launch checks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PackedDepth {
    /// Code width (2 or 4).
    pub bits: u32,
    /// Words of a packed row of one block (a multiple of 4).
    pub row_words: u32,
    /// Whether a product takes two blocks side by side.
    pub paired: bool,
}

impl PackedDepth {
    /// Codes to a byte.
    pub fn fields(&self) -> u32 {
        8 / self.bits
    }

    /// Words of a row the lane takes.
    pub fn lane_words(&self) -> u32 {
        self.row_words / QUAD
    }

    /// The lane's second-operand registers of a block (or value group): one per word and field.
    pub fn registers(&self) -> u32 {
        self.lane_words() * self.fields()
    }

    /// The registers `column_registers` gives: both halves' where paired.
    pub fn column_registers(&self) -> u32 {
        if self.paired {
            2 * self.registers()
        } else {
            self.registers()
        }
    }

    /// Products per field of a row tile.
    pub fn per_field(&self) -> u32 {
        if self.paired {
            self.lane_words()
        } else {
            self.lane_words() / 2
        }
    }

    /// Products of a row tile: the block's whole depth.
    pub fn products(&self) -> u32 {
        self.fields() * self.per_field()
    }

    /// The field product `product` of a row tile takes.
    pub fn field(&self, product: u32) -> u32 {
        product / self.per_field()
    }

    /// The lane's word of product `product`'s depth half `half` (the same in both halves where
    /// paired).
    pub fn word(&self, product: u32, half: u32) -> u32 {
        let k = product % self.per_field();
        if self.paired {
            k
        } else {
            2 * k + half
        }
    }

    /// The lane's register (of [`Self::registers`]) holding word `word`, field `field`.
    pub fn register(&self, word: u32, field: u32) -> u32 {
        word * self.fields() + field
    }

    /// The weight of a code in the products' sums: `2^(bits · (fields − 1))`.
    pub fn lift(&self) -> u32 {
        1 << (self.bits * (self.fields() - 1))
    }

    /// Codes of a word.
    pub fn word_codes(&self) -> u32 {
        32 / self.bits
    }

    /// The depth position within a block (channel of a key row, slot of a value row) of byte `b`
    /// of lane `4g + t`'s register of word `word`, field `field`: code `fields · b + field` of the
    /// row's word `4 · word + t`.
    pub fn position(&self, t: u32, word: u32, field: u32, b: u32) -> u32 {
        self.word_codes() * (QUAD * word + t) + self.fields() * b + field
    }

    /// The lane's codes of a block (or value group), four to each of its [`Self::registers`]:
    /// code `4 · register(word, field) + b` is byte `b` of that register.
    pub fn lane_codes(&self) -> u32 {
        4 * self.registers()
    }

    /// [`Self::position`] of the lane's code `code` (of [`Self::lane_codes`]).
    pub fn code_position(&self, t: u32, code: u32) -> u32 {
        let (register, b) = (code / 4, code % 4);
        self.position(t, register / self.fields(), register % self.fields(), b)
    }

    /// The first position (for `t = 0`) of the lane's `q`-th run of 4 consecutive positions: a
    /// word's codes lie at consecutive positions.
    pub fn quad_position(&self, q: u32) -> u32 {
        let (word, within) = ((4 * q) / self.word_codes(), (4 * q) % self.word_codes());
        self.word_codes() * QUAD * word + within
    }

    /// The lane's code (of [`Self::lane_codes`]) at `position` (for `t = 0`): the inverse of
    /// [`Self::code_position`].
    pub fn code_at(&self, position: u32) -> u32 {
        let word = position / (self.word_codes() * QUAD);
        let within = position % self.word_codes();
        let (b, field) = (within / self.fields(), within % self.fields());
        4 * self.register(word, field) + b
    }

    /// The mask of field 0 in every byte.
    fn field_mask(&self) -> u32 {
        ((1u32 << self.bits) - 1) * 0x0101_0101
    }

    /// The mask of field `field` in every byte.
    pub fn mask(&self, field: u32) -> u32 {
        self.field_mask() << (self.bits * field)
    }
}

/// [`PackedDepth::code_position`] for the calling lane's `t` (positions step by a word's codes
/// per lane).
#[cube]
pub(super) fn position(t: u32, #[comptime] code: u32, #[comptime] depth: PackedDepth) -> u32 {
    comptime!(depth.code_position(0, code)) + lane_position(t, depth)
}

/// The lane's part of its [`position`]s, the same for all its codes: a hot loop adds it to its
/// list's start, widens that to 64 bits once and adds each code's compile-time part,
/// `code_position(0, code)`, in 64 bits (see [`LaneRows`]).
#[cube]
pub(super) fn lane_position(t: u32, #[comptime] depth: PackedDepth) -> u32 {
    comptime!(depth.word_codes()) * t
}

/// The lane's words of a shared list with one word a depth position (the numerators tile), from
/// `start` (the list's first word plus [`lane_position`]): `out[code]` is the word at the code's
/// [`position`]. Each run of 4 consecutive positions ([`PackedDepth::quad_position`]) is one
/// 16-byte read, `start` being a multiple of 4 words.
#[cube]
pub(super) fn position_words(list: &SharedMemory<u32>, start: usize, #[comptime] depth: PackedDepth) -> Array<u32> {
    let mut out = Array::<u32>::new(comptime!(depth.lane_codes() as usize));
    #[unroll]
    for q in 0..comptime!(depth.lane_codes() / 4) {
        let at = start + comptime!(depth.quad_position(q) as usize);
        let quad = list.slice(at, at + 4).into_vectorized().with_vector_size::<Const<4>>()[0];
        #[unroll]
        for j in 0..4u32 {
            out[comptime!(depth.code_at(depth.quad_position(q) + j) as usize)] = quad[j as usize];
        }
    }
    out
}

/// Where lane `4g + t`'s words of a step's packed rows lie in the list it reads: the index of
/// word `t` of row `g` of the pair's first block and (paired) of its second. 64-bit, so that a
/// word's index is this plus a compile-time offset, which the CUDA compiler folds into the load's
/// address: a 32-bit sum may wrap before it is widened, so it cost one or two instructions a load.
/// On an H200 this gained 4–6 % for `hack2` and `hack4` at 32K batch 8 and cost `hack3` (4-bit
/// keys loaded from the caches) 20 %: ptxas then scheduled its kernel into 173 registers instead
/// of 255; 32-bit sums for cache loads alone did not win it back
/// (`results/hack-decode-channel-h200.md`, sessions 58–59).
#[derive(CubeType)]
pub(super) struct LaneRows {
    pub first: usize,
    pub second: usize,
}

/// [`LaneRows`] of blocks whose first rows are `first` and `second` in the list.
#[cube]
pub(super) fn lane_rows(first: u32, second: u32, g: u32, t: u32, #[comptime] depth: PackedDepth) -> LaneRows {
    let row_words = comptime!(depth.row_words);
    LaneRows { first: ((first + g) * row_words + t) as usize, second: ((second + g) * row_words + t) as usize }
}

/// The lane's words of rows `tile_row + g` and `tile_row + g + 8` of the pair's first block
/// (`lanes`), then (paired) of its second: word `j` of row `tile_row + g + 8r` of block `s` at
/// `[(2s + r) · lane_words + j]`.
#[cube]
pub(super) fn product_rows<W: WordList>(
    words: &W,
    lanes: &LaneRows,
    #[comptime] tile_row: u32,
    #[comptime] depth: PackedDepth,
) -> Array<u32> {
    let blocks = comptime!(if depth.paired { 2u32 } else { 1u32 });
    let (row_words, lane_words) = comptime!((depth.row_words, depth.lane_words()));
    let mut out = Array::<u32>::new(comptime!((blocks * 2 * lane_words) as usize));
    #[unroll]
    for r in 0..2u32 {
        #[unroll]
        for j in 0..lane_words {
            let offset = comptime!(((tile_row + 8 * r) * row_words + QUAD * j) as usize);
            out[comptime!((r * lane_words + j) as usize)] = words[lanes.first + offset];
            if comptime!(depth.paired) {
                out[comptime!(((2 + r) * lane_words + j) as usize)] = words[lanes.second + offset];
            }
        }
    }
    out
}

/// A row tile's products over a block's whole depth (or a value group's): lane `4g + t`'s words
/// `rows` ([`product_rows`]) against its column registers `codes` from `first`
/// ([`column_registers`]) of `B` codes (`i8` query codes, `u8` weight codes), word by word and
/// each word's fields into their own accumulators, so that consecutive products are independent;
/// the sums lifted to [`PackedDepth::lift`] ([`join_fields`]).
#[cube]
pub(super) fn tile_products<B: Int>(
    rows: &Array<u32>,
    codes: &Array<u32>,
    #[comptime] first: u32,
    #[comptime] depth: PackedDepth,
) -> Array<Dots> {
    let product = MmaDefinition::<u8, B, i32>::new(16usize, 8usize, 32usize);
    let mut fields = field_dots(depth);
    #[unroll]
    for k in 0..comptime!(depth.per_field()) {
        #[unroll]
        for f in 0..comptime!(depth.fields()) {
            let step = comptime!(f * depth.per_field() + k);
            let a = row_operand(rows, step, depth);
            let registers = column_operand(codes, first, step, depth);
            let mut b = Array::<Codes<B>>::new(2usize);
            b[0] = Codes::<B>::reinterpret(registers[0]);
            b[1] = Codes::<B>::reinterpret(registers[1]);
            product.execute_inplace(&a, &b, fields.index_mut(comptime!(f as usize)));
        }
    }
    join_fields(&fields, depth)
}

/// Lane `4g + t`'s first operand of product `product` of a row tile over `rows` ([`product_rows`]):
/// register `reg` for row `g + 8 (reg mod 2)`, depth half `reg / 2`, one field of one word.
#[cube]
pub(super) fn row_operand(
    rows: &Array<u32>,
    #[comptime] product: u32,
    #[comptime] depth: PackedDepth,
) -> Array<Codes<u8>> {
    let (lane_words, mask) = comptime!((depth.lane_words(), depth.mask(depth.field(product))));
    let mut a = Array::<Codes<u8>>::new(4usize);
    #[unroll]
    for reg in 0..4u32 {
        let (r, half) = comptime!((reg % 2, reg / 2));
        let block = comptime!(if depth.paired { half } else { 0 });
        let word = comptime!(depth.word(product, half));
        a[reg as usize] =
            Codes::<u8>::reinterpret(rows[comptime!(((2 * block + r) * lane_words + word) as usize)] & mask);
    }
    a
}

/// Lane `4g + t`'s second operand of product `product` from its column's registers `codes`
/// ([`column_registers`], a block's or value group's from `first`).
#[cube]
pub(super) fn column_operand(
    codes: &Array<u32>,
    #[comptime] first: u32,
    #[comptime] product: u32,
    #[comptime] depth: PackedDepth,
) -> Array<u32> {
    let field = comptime!(depth.field(product));
    let mut b = Array::<u32>::new(2usize);
    #[unroll]
    for half in 0..2u32 {
        let reg = comptime!(depth.register(depth.word(product, half), field));
        let at = comptime!(if depth.paired { half * depth.registers() + reg } else { reg });
        b[half as usize] = codes[comptime!((first + at) as usize)];
    }
    b
}

/// The lane's second-operand registers of a block (or value group) as its products take them,
/// from its block's `own` ones: paired, a depth half is one block and a column sees only its own
/// block (`side`), so `[half · registers + reg]` is `own[reg]` in its block's half and zero in
/// the other's, once per block rather than once per product; otherwise `own` itself.
#[cube]
pub(super) fn column_registers(own: &Array<u32>, side: u32, #[comptime] depth: PackedDepth) -> Array<u32> {
    let registers = comptime!(depth.registers());
    let mut out = Array::<u32>::new(comptime!(depth.column_registers() as usize));
    #[unroll]
    for half in 0..comptime!(depth.column_registers() / registers) {
        #[unroll]
        for reg in 0..registers {
            let code = own[reg as usize];
            let at = comptime!((half * registers + reg) as usize);
            if comptime!(depth.paired) {
                out[at] = select(side == half, code, 0u32);
            } else {
                out[at] = code;
            }
        }
    }
    out
}

/// A row tile's accumulators, one half-fragment pair per field (see [`PackedDepth`]), zero.
/// The products of one field depend on each other through their accumulators, those of
/// different fields do not: with 2 warps a scheduler, a tile's products in one chain waited for
/// each other's results.
#[cube]
fn field_dots(#[comptime] depth: PackedDepth) -> Sequence<Array<Dots>> {
    let mut fields = Sequence::new();
    #[unroll]
    for _ in 0..comptime!(depth.fields()) {
        let mut dots = Array::<Dots>::new(2usize);
        dots[0] = Dots::new(0i32);
        dots[1] = Dots::new(0i32);
        fields.push(dots);
    }
    fields
}

/// A row tile's sums from its [`field_dots`], each term lifted to [`PackedDepth::lift`]: field
/// `f`'s terms weigh `2^(bits · f)`, so field `f`'s sum is multiplied by `2^bits` once for each
/// later field (Horner's rule, from field 0).
#[cube]
fn join_fields(fields: &Sequence<Array<Dots>>, #[comptime] depth: PackedDepth) -> Array<Dots> {
    let weight = Dots::new(comptime!(1i32 << depth.bits));
    let mut dots = Array::<Dots>::new(2usize);
    dots[0] = fields.index(0usize)[0];
    dots[1] = fields.index(0usize)[1];
    #[unroll]
    for f in 1..comptime!(depth.fields()) {
        let field = fields.index(comptime!(f as usize));
        dots[0] = dots[0] * weight + field[0];
        dots[1] = dots[1] * weight + field[1];
    }
    dots
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// A row's code at `position` (codes packed from the low bits of each word).
    fn code_at(row: &[u32], position: u32, bits: u32) -> i64 {
        let per_word = 32 / bits;
        ((row[(position / per_word) as usize] >> (bits * (position % per_word))) & ((1 << bits) - 1)) as i64
    }

    /// One row tile's products for one row and one column as the lanes hold them, emulated on the
    /// host: a product adds, over the lanes `t` of the column's quad and both depth halves, the
    /// bytes of the first operand (one field of one word of the half's block, masked) times those
    /// of the second (the column's codes at the byte's [`PackedDepth::position`], zero in the
    /// other block's half where paired), into the sum of its field; the fields' sums are joined
    /// by Horner's rule, times `2^bits` before each next field. It must equal `lift` times the
    /// plain dot product of the column's block's row.
    fn emulated_dot(depth: PackedDepth, rows: &[Vec<u32>; 2], codes: &[Vec<i64>; 2], side: usize) -> i64 {
        let mut fields = vec![0i64; depth.fields() as usize];
        for product in 0..depth.products() {
            let field = depth.field(product);
            let acc = &mut fields[field as usize];
            for t in 0..QUAD {
                for half in 0..2 {
                    let block = if depth.paired { half } else { 0 };
                    let word = depth.word(product, half);
                    let a = rows[block as usize][(QUAD * word + t) as usize] & depth.mask(field);
                    for b in 0..4 {
                        let byte = ((a >> (8 * b)) & 0xFF) as i64;
                        let column_block = if depth.paired { side } else { 0 };
                        let seen = !depth.paired || half as usize == side;
                        let q = codes[column_block][depth.position(t, word, field, b) as usize];
                        *acc += byte * if seen { q } else { 0 };
                    }
                }
            }
        }
        fields.iter().fold(0, |acc, field| (acc << depth.bits) + field)
    }

    #[test]
    fn masked_fields_summed_apart_and_joined_give_the_lifted_dot_product() {
        let mut rng = StdRng::seed_from_u64(7);
        // hack2's keys at SmolLM2's and Llama's heads, 4-bit keys, 2-bit values at Π = 128, and
        // one block a product (more than 4 query heads a KV head).
        let shapes = [(2, 4, true), (2, 8, true), (4, 16, true), (4, 8, true), (2, 8, false), (4, 16, false)];
        for (bits, row_words, paired) in shapes {
            let depth = PackedDepth { bits, row_words, paired };
            let positions = row_words * depth.word_codes();
            assert_eq!(depth.products() * if paired { 16 } else { 32 }, positions, "{depth:?}");
            for _ in 0..20 {
                let rows: [Vec<u32>; 2] = std::array::from_fn(|_| (0..row_words).map(|_| rng.random()).collect());
                let codes: [Vec<i64>; 2] =
                    std::array::from_fn(|_| (0..positions).map(|_| rng.random_range(-127..=127)).collect());
                for side in 0..if paired { 2 } else { 1 } {
                    let dot: i64 =
                        (0..positions).map(|p| code_at(&rows[side], p, bits) * codes[side][p as usize]).sum();
                    assert_eq!(emulated_dot(depth, &rows, &codes, side), depth.lift() as i64 * dot, "{depth:?}");
                }
            }
        }
    }

    #[test]
    fn a_lanes_registers_cover_its_quarter_of_the_depth_once() {
        for (bits, row_words) in [(2, 4), (2, 8), (4, 16), (4, 8)] {
            let depth = PackedDepth { bits, row_words, paired: true };
            let mut seen = vec![0; (row_words * depth.word_codes()) as usize];
            for t in 0..QUAD {
                for word in 0..depth.lane_words() {
                    for field in 0..depth.fields() {
                        for b in 0..4 {
                            seen[depth.position(t, word, field, b) as usize] += 1;
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{depth:?}");
            assert_eq!(depth.lane_codes() * QUAD, seen.len() as u32);
            // The kernel builds the lane's codes in `code_position`'s order: byte `b` of the
            // register of word `word`, field `field` is the code the products take there.
            for t in 0..QUAD {
                for word in 0..depth.lane_words() {
                    for field in 0..depth.fields() {
                        for b in 0..4 {
                            let code = 4 * depth.register(word, field) + b;
                            assert_eq!(depth.code_position(t, code), depth.position(t, word, field, b));
                        }
                    }
                }
            }
        }
        // The lane's runs of 4 consecutive positions hold each of its codes once.
        for (bits, row_words) in [(2, 4), (2, 8), (4, 16), (4, 8)] {
            let depth = PackedDepth { bits, row_words, paired: true };
            let mut codes = vec![0; depth.lane_codes() as usize];
            for q in 0..depth.lane_codes() / 4 {
                for j in 0..4 {
                    let position = depth.quad_position(q) + j;
                    let code = depth.code_at(position);
                    assert_eq!(depth.code_position(0, code), position, "{depth:?}");
                    codes[code as usize] += 1;
                }
            }
            assert!(codes.iter().all(|&n| n == 1), "{depth:?}");
        }
        assert_eq!(PackedDepth { bits: 2, row_words: 8, paired: true }.lift(), 64);
        assert_eq!(PackedDepth { bits: 4, row_words: 16, paired: true }.lift(), 16);
    }
}
