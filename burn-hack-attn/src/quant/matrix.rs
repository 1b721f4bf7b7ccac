//! A matrix quantized row by row, each row split into partitions of Π along its columns (the
//! inner dimension of a product).

use super::{dequantize_group, quantize_group, GroupParams, QuantError, Rounder};

/// `rows × inner` values quantized in partitions of `partition` consecutive columns per row (the
/// last partition of a row holds the remainder when `inner` is not a multiple of Π), with each
/// partition's code sum kept (HACK's summation elimination).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionedMatrix {
    rows: usize,
    inner: usize,
    partition: usize,
    bits: u8,
    /// Unpacked codes, `[rows, inner]` row-major.
    codes: Vec<u8>,
    /// Per-partition metadata, `[rows, parts]`.
    params: Vec<GroupParams>,
    /// Per-partition code sums, `[rows, parts]`.
    sums: Vec<u32>,
}

impl PartitionedMatrix {
    /// Quantizes `values` (`[rows, inner]`, row-major) to `bits`-bit codes.
    pub fn quantize(
        values: &[f32],
        rows: usize,
        inner: usize,
        partition: usize,
        bits: u8,
        rounder: &mut Rounder,
    ) -> Result<Self, QuantError> {
        assert_eq!(values.len(), rows * inner, "values must be [rows, inner]");
        assert!(partition > 0 && inner > 0);
        let mut codes = Vec::with_capacity(values.len());
        let mut params = Vec::new();
        let mut sums = Vec::new();
        for row in values.chunks_exact(inner) {
            for part in row.chunks(partition) {
                let (p, c) = quantize_group(part, bits, rounder)?;
                sums.push(c.iter().map(|&x| x as u32).sum());
                params.push(p);
                codes.extend(c);
            }
        }
        Ok(Self { rows, inner, partition, bits, codes, params, sums })
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

    /// Unpacked codes, `[rows, inner]`.
    pub fn codes(&self) -> &[u8] {
        &self.codes
    }

    /// Metadata of partition `p` of `row`.
    pub fn params(&self, row: usize, p: usize) -> GroupParams {
        self.params[row * self.parts() + p]
    }

    /// Code sum of partition `p` of `row`.
    pub fn sum(&self, row: usize, p: usize) -> u32 {
        self.sums[row * self.parts() + p]
    }

    /// The dequantized values, `[rows, inner]`.
    pub fn dequantized(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.codes.len());
        for (r, row) in self.codes.chunks_exact(self.inner).enumerate() {
            for (p, part) in row.chunks(self.partition).enumerate() {
                out.extend(dequantize_group(self.params(r, p), part));
            }
        }
        out
    }
}
