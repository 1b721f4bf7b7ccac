//! Quantized partitions appended one after another: each group's packed codes (byte-aligned),
//! fp16 metadata and code sum ([`super::PartitionedMatrix`] keeps its partitions in one).

use super::{dequantize_group, pack_codes, quantize_group, unpack_codes, GroupParams, QuantError, Rounder};

/// A growing list of quantized groups, indexed in the order they were pushed.
#[derive(Debug, Clone)]
pub(crate) struct GroupTable {
    bits: u8,
    packed: Vec<u8>,
    /// Per group: first byte in `packed` and number of codes.
    spans: Vec<(usize, usize)>,
    params: Vec<GroupParams>,
    sums: Vec<u16>,
}

impl GroupTable {
    pub(crate) fn new(bits: u8) -> Self {
        Self { bits, packed: Vec::new(), spans: Vec::new(), params: Vec::new(), sums: Vec::new() }
    }

    /// Quantizes `values` as one group and appends it; element `i` rounds with the offset at global
    /// index `index(i)`.
    pub(crate) fn push(
        &mut self,
        values: &[f32],
        rounder: &Rounder,
        index: impl Fn(usize) -> u32,
    ) -> Result<(), QuantError> {
        let (params, codes) = quantize_group(values, self.bits, rounder, index)?;
        self.spans.push((self.packed.len(), codes.len()));
        self.params.push(params);
        self.sums.push(codes.iter().map(|&c| c as u16).sum());
        self.packed.extend(pack_codes(&codes, self.bits));
        Ok(())
    }

    /// Unpacked codes of group `i`.
    pub(crate) fn codes(&self, i: usize) -> Vec<u8> {
        let (start, len) = self.spans[i];
        unpack_codes(&self.packed[start..], self.bits, len)
    }

    pub(crate) fn params(&self, i: usize) -> GroupParams {
        self.params[i]
    }

    pub(crate) fn sum(&self, i: usize) -> u16 {
        self.sums[i]
    }

    /// Group `i` dequantized.
    pub(crate) fn dequantized(&self, i: usize) -> Vec<f32> {
        dequantize_group(self.params[i], &self.codes(i))
    }
}
