//! The encode kernel: nearest centroid per subspace, packed into 32-bit words.
//!
//! One unit per (vector, word): it encodes the word's `32 / nbits` subspaces with exactly the
//! host rule ([`crate::codebook::nearest_centroid`]: squared distance summed channel by channel
//! from centroid 0, strictly smaller wins) and writes the packed word.

use cubecl::prelude::*;

use crate::kernels::PqShape;

/// Squared distance of `x[x_base..x_base + sub_dim]` to centroid `book[c_base..c_base + sub_dim]`.
#[cube]
fn distance(x: &Array<f32>, x_base: u32, book: &Array<f32>, c_base: u32, #[comptime] sub_dim: u32) -> f32 {
    let mut dist = 0.0f32;
    for j in 0..sub_dim {
        let diff = x[(x_base + j) as usize] - book[(c_base + j) as usize];
        dist += diff * diff;
    }
    dist
}

/// Encodes `x` (`[rows, head_dim]`, rows ordered `[batch, kv_heads, tokens]`) with `books`
/// (`[groups, subspaces, centroids, sub_dim]`) into `words` (`[rows, words]`).
#[cube(launch_unchecked)]
pub fn encode_kernel(
    x: &Array<f32>,
    books: &Array<f32>,
    words: &mut Array<u32>,
    rows: u32,
    tokens: u32,
    kv_heads: u32,
    per_head_books: u32,
    #[comptime] shape: PqShape,
) {
    let index = ABSOLUTE_POS as u32;
    if index >= rows * shape.words {
        terminate!();
    }
    let row = index / shape.words;
    let w = index % shape.words;
    let head = (row / tokens) % kv_heads;
    let group = head * per_head_books;
    let per_word = 32 / shape.nbits;
    let mut packed = 0u32;
    for j in 0..per_word {
        let i = w * per_word + j;
        if i < shape.subspaces {
            let x_base = row * shape.head_dim + i * shape.sub_dim;
            let book_base = (group * shape.subspaces + i) * shape.centroids * shape.sub_dim;
            let mut best = distance(x, x_base, books, book_base, shape.sub_dim);
            let mut best_index = 0u32;
            for c in 1..shape.centroids {
                let dist = distance(x, x_base, books, book_base + c * shape.sub_dim, shape.sub_dim);
                if dist < best {
                    best = dist;
                    best_index = c;
                }
            }
            packed |= best_index << (j * shape.nbits);
        }
    }
    words[index as usize] = packed;
}
