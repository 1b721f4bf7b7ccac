//! Block arithmetic: coalescing, splitting into frames, reassembly in any order.

use burn_kvtransfer::{
    protocol::blocks::{blocks_per_frame, coalesce, span, split, MisplacedBlocks, Reassembly},
    wire::{BlockRange, Layout, ModelShape, BLOCK_HEADER_LEN},
};

fn r(layer: u32, first: u32, count: u32) -> BlockRange {
    BlockRange { request: 1, layer, first, count }
}

#[test]
fn contiguous_and_overlapping_ranges_coalesce_per_layer() {
    let merged = coalesce(vec![r(0, 4, 2), r(0, 0, 2), r(0, 2, 2), r(1, 6, 1), r(0, 5, 4), r(1, 0, 0), r(1, 8, 1)]);
    assert_eq!(merged, vec![r(0, 0, 9), r(1, 6, 1), r(1, 8, 1)]);
    let other_request = BlockRange { request: 2, ..r(0, 2, 2) };
    assert_eq!(coalesce(vec![r(0, 0, 2), other_request]).len(), 2);
}

#[test]
fn ranges_split_into_frames_under_the_cap() {
    let shape = ModelShape { num_layers: 1, kv_heads: 1, heads: 1, head_dim: 1, vocab: 1 };
    let layout = Layout { block_size: 1000, shape };
    assert_eq!(blocks_per_frame(&layout, 3000 + BLOCK_HEADER_LEN as u32), 3);
    assert_eq!(blocks_per_frame(&layout, 10), 1);
    let pieces: Vec<_> = split(r(0, 5, 7), 3).collect();
    assert_eq!(pieces, vec![r(0, 5, 3), r(0, 8, 3), r(0, 11, 1)]);
    assert_eq!(span(1000, 2500, 2, 5), Some((2000, 2500)));
    assert_eq!(span(1000, 2500, 3, 1), None);
}

/// Stores `data` as blocks from `first`, with its true checksum.
fn put(layer: &mut Reassembly, first: u32, data: &[u8]) -> Result<(), MisplacedBlocks> {
    layer.put(first, data, crc32fast::hash(data))
}

#[test]
fn a_layer_reassembles_from_blocks_in_any_order_with_duplicates() {
    let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
    let mut layer = Reassembly::new(vec![0; data.len()], 1000, crc32fast::hash(&data));
    put(&mut layer, 2, &data[2000..]).unwrap();
    assert_eq!(layer.missing(), vec![(0, 2)]);
    put(&mut layer, 0, &data[..1000]).unwrap();
    put(&mut layer, 0, &data[..1000]).unwrap();
    assert_eq!(layer.missing(), vec![(1, 1)]);
    assert!(!layer.is_complete());
    // Misplaced: not a whole block, past the end, a short block that is not the last.
    assert!(put(&mut layer, 1, &data[..999]).is_err());
    assert!(put(&mut layer, 3, &data[..10]).is_err());
    assert!(put(&mut layer, 0, &data[..1500]).is_err());
    put(&mut layer, 1, &data[1000..2000]).unwrap();
    assert!(layer.is_complete());
    assert_eq!(layer.bytes(), &data[..]);
    assert_eq!(layer.checksum(), layer.crc, "combined from the pieces' checksums");
}

#[test]
fn the_layer_checksum_is_right_after_overlapping_pieces_and_catches_a_wrong_piece() {
    let data: Vec<u8> = (0..4000u32).map(|i| (i * 7) as u8).collect();
    let crc = crc32fast::hash(&data);
    // Pieces that overlap partially: the checksum falls back to hashing the bytes.
    let mut layer = Reassembly::new(vec![0; data.len()], 1000, crc);
    put(&mut layer, 0, &data[..2000]).unwrap();
    put(&mut layer, 1, &data[1000..3000]).unwrap();
    put(&mut layer, 3, &data[3000..]).unwrap();
    assert!(layer.is_complete());
    assert_eq!(layer.checksum(), crc);
    // A piece whose bytes differ from what the sender hashed: the layer checksum differs.
    let mut layer = Reassembly::new(vec![0; data.len()], 1000, crc);
    put(&mut layer, 0, &data[..2000]).unwrap();
    let mut flipped = data[2000..].to_vec();
    flipped[5] ^= 1;
    put(&mut layer, 2, &flipped).unwrap();
    assert_ne!(layer.checksum(), crc);
    // After a reset and a correct re-delivery it matches.
    layer.reset();
    put(&mut layer, 0, &data[..2000]).unwrap();
    put(&mut layer, 2, &data[2000..]).unwrap();
    assert_eq!(layer.checksum(), crc);
}

#[test]
fn claims_reserve_only_missing_blocks_and_hold_off_completion_until_finished() {
    let data: Vec<u8> = (0..3500u32).map(|i| (i % 251) as u8).collect();
    let mut layer = Reassembly::new(vec![0; data.len()], 1000, crc32fast::hash(&data));
    put(&mut layer, 1, &data[1000..2000]).unwrap();
    // A piece over blocks 0..3 claims blocks 0 and 2 only (block 1 is received).
    let claim = layer.claim(0, 3000).unwrap().expect("blocks 0 and 2 are missing");
    assert_eq!(claim.copies().collect::<Vec<_>>(), vec![(0, 0, 1000), (2000, 2000, 1000)]);
    assert_eq!(layer.missing(), vec![(3, 1)], "claimed blocks are not re-pulled");
    assert!(layer.claim(0, 3000).unwrap().is_none(), "nothing left to claim there");
    assert!(matches!(layer.claim(3, 1000), Err(MisplacedBlocks { .. })), "the last block is 500 bytes");
    let last = layer.claim(3, 500).unwrap().expect("block 3 is missing");
    assert_eq!(last.copies().collect::<Vec<_>>(), vec![(0, 3000, 500)]);
    layer.finish(last, crc32fast::hash(&data[3000..]));
    assert!(!layer.is_complete(), "blocks 0 and 2 are claimed, not finished");
    layer.finish(claim, crc32fast::hash(&data[..3000]));
    assert!(layer.is_complete());
    // The claimant here never wrote blocks 0 and 2 (the landing does, from another thread):
    // the part-stored piece makes the layer hash its bytes, which catches that.
    assert_ne!(layer.checksum(), layer.crc);
}
