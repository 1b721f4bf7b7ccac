//! A matrix quantized row by row, each row split into partitions of Π along its columns (the
//! inner dimension of a product).

use super::{GroupParams, GroupTable, QuantError, Rounder};

/// `rows × inner` values quantized in partitions of `partition` consecutive columns per row (the
/// last partition of a row holds the remainder when `inner` is not a multiple of Π), with each
/// partition's code sum kept (HACK's summation elimination).
#[derive(Debug, Clone)]
pub struct PartitionedMatrix {
    rows: usize,
    inner: usize,
    partition: usize,
    bits: u8,
    /// `[rows, parts]` quantized partitions.
    table: GroupTable,
}

impl PartitionedMatrix {
    /// Quantizes `values` (`[rows, inner]`, row-major) to `bits`-bit codes; the element at
    /// `(r, c)` rounds with the offset at index `r * inner + c`.
    pub fn quantize(
        values: &[f32],
        rows: usize,
        inner: usize,
        partition: usize,
        bits: u8,
        rounder: &Rounder,
    ) -> Result<Self, QuantError> {
        assert_eq!(values.len(), rows * inner, "values must be [rows, inner]");
        assert!(partition > 0 && inner > 0);
        let mut table = GroupTable::new(bits);
        for (r, row) in values.chunks_exact(inner).enumerate() {
            for (p, part) in row.chunks(partition).enumerate() {
                table.push(part, rounder, |i| (r * inner + p * partition + i) as u32)?;
            }
        }
        Ok(Self { rows, inner, partition, bits, table })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (the inner dimension).
    pub fn inner(&self) -> usize {
        self.inner
    }

    /// Partition size Π.
    pub fn partition(&self) -> usize {
        self.partition
    }

    /// Bits per code.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// Partitions per row, `ceil(inner / Π)`.
    pub fn parts(&self) -> usize {
        self.inner.div_ceil(self.partition)
    }

    /// Elements in partition `p` of a row (Π, or the remainder for the last one).
    pub fn part_len(&self, p: usize) -> usize {
        self.partition.min(self.inner - p * self.partition)
    }

    /// Unpacked codes of partition `p` of `row`, `[part_len(p)]`.
    pub fn codes(&self, row: usize, p: usize) -> Vec<u8> {
        self.table.codes(row * self.parts() + p)
    }

    /// Metadata of partition `p` of `row`.
    pub fn params(&self, row: usize, p: usize) -> GroupParams {
        self.table.params(row * self.parts() + p)
    }

    /// Code sum of partition `p` of `row`.
    pub fn sum(&self, row: usize, p: usize) -> u16 {
        self.table.sum(row * self.parts() + p)
    }

    /// The dequantized values, `[rows, inner]`.
    pub fn dequantized(&self) -> Vec<f32> {
        (0..self.rows * self.parts()).flat_map(|i| self.table.dequantized(i)).collect()
    }
}
