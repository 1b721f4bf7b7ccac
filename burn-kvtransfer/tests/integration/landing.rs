//! The landing: blocks copied into their layers by several threads at once, each layer completed
//! exactly once, and nothing landed in layers that are not (or no longer) open.

use std::sync::{Arc, Barrier};

use burn_kvtransfer::{
    protocol::{
        blocks::Reassembly,
        landing::{Landed, Landing},
    },
    wire::{BlockFrame, FrameCodec, Message},
};

fn header(request: u64, layer: u32, first: u32) -> [u8; 16] {
    BlockFrame::header(request, layer, first)
}

const CODEC: FrameCodec = FrameCodec { max_payload: 1 << 20 };
const BLOCK: u32 = 64;

/// The Block frame carrying `data` as blocks from `first` of `layer` of `request`.
fn block(request: u64, layer: u32, first: u32, data: &[u8]) -> BlockFrame {
    let encoded = BlockFrame::encode(&CODEC, request, layer, first, data).unwrap();
    match Message::decode(CODEC.decode(&encoded).unwrap().unwrap().0).unwrap() {
        Message::Block(b) => b,
        other => panic!("{other:?}"),
    }
}

/// A layer of `len` pseudo-random bytes and the reassembly that receives it.
fn layer(len: usize, seed: u8) -> (Vec<u8>, Reassembly) {
    let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    let crc = crc32fast::hash(&bytes);
    (bytes, Reassembly::new(vec![0; len], BLOCK, crc))
}

/// The frames of a layer cut into pieces of `per_frame` blocks.
fn frames(request: u64, layer: u32, bytes: &[u8], per_frame: usize) -> Vec<BlockFrame> {
    let piece = per_frame * BLOCK as usize;
    let pieces = bytes.chunks(piece).enumerate();
    pieces.map(|(i, data)| block(request, layer, (i * per_frame) as u32, data)).collect()
}

#[test]
fn frames_landed_by_eight_threads_complete_their_layers_once() {
    let landing = Landing::default();
    // Two layers whose last block is short, each in 3-block pieces.
    let (bytes0, layer0) = layer(50 * BLOCK as usize + 17, 1);
    let (bytes1, layer1) = layer(31 * BLOCK as usize + 5, 2);
    landing.open(7, 0, layer0);
    landing.open(7, 1, layer1);
    let mut all = frames(7, 0, &bytes0, 3);
    all.extend(frames(7, 1, &bytes1, 3));
    let threads = 8;
    let start = Arc::new(Barrier::new(threads));
    let outcomes: Vec<Landed> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (landing, start, mine) = (landing.clone(), start.clone(), &all);
                s.spawn(move || {
                    start.wait();
                    mine.iter().skip(t).step_by(threads).map(|f| landing.land(f)).collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(outcomes.iter().filter(|&o| *o == Landed::Completed).count(), 2);
    assert_eq!(outcomes.iter().filter(|&o| *o == Landed::Stored).count(), all.len() - 2);
    for (l, bytes) in [(0, &bytes0), (1, &bytes1)] {
        let received = landing.take(7, l).expect("an open layer");
        assert_eq!(received.bytes(), &bytes[..]);
        assert_eq!(received.checksum(), received.crc);
    }
}

#[test]
fn a_late_duplicate_is_stored_without_completing_again() {
    let landing = Landing::default();
    let (bytes, reassembly) = layer(4 * BLOCK as usize, 3);
    landing.open(1, 0, reassembly);
    let pieces = frames(1, 0, &bytes, 2);
    assert_eq!(landing.land(&pieces[0]), Landed::Stored);
    assert_eq!(landing.missing(1, 0), vec![(2, 2)]);
    assert_eq!(landing.land(&pieces[1]), Landed::Completed);
    assert_eq!(landing.land(&pieces[1]), Landed::Stored);
    assert_eq!(landing.take(1, 0).unwrap().bytes(), &bytes[..]);
}

#[test]
fn nothing_lands_in_layers_not_open_taken_or_closed() {
    let landing = Landing::default();
    let (bytes, reassembly) = layer(4 * BLOCK as usize, 4);
    let piece = block(1, 0, 0, &bytes[..BLOCK as usize]);
    assert_eq!(landing.land(&piece), Landed::NotOpen, "not announced yet");
    landing.open(1, 0, reassembly);
    assert_eq!(landing.land(&piece), Landed::Stored);
    assert!(landing.take(1, 0).is_none(), "an incomplete layer is not taken");
    assert_eq!(landing.land(&block(1, 0, 1, &bytes[BLOCK as usize..])), Landed::Completed);
    assert_eq!(landing.take(1, 0).unwrap().bytes(), &bytes[..]);
    assert!(landing.take(1, 0).is_none());
    assert_eq!(landing.land(&piece), Landed::NotOpen, "taken");
    assert_eq!(landing.missing(1, 0), Vec::<(u32, u32)>::new());

    landing.open(1, 0, layer(4 * BLOCK as usize, 4).1);
    landing.open(1, 1, layer(4 * BLOCK as usize, 4).1);
    landing.open(2, 0, layer(4 * BLOCK as usize, 4).1);
    landing.close(1);
    assert_eq!(landing.land(&piece), Landed::NotOpen, "closed");
    assert_eq!(landing.land(&block(1, 1, 0, &bytes[..BLOCK as usize])), Landed::NotOpen, "closed");
    assert_eq!(landing.land(&block(2, 0, 0, &bytes[..BLOCK as usize])), Landed::Stored, "another request");
}

#[test]
fn blocks_outside_their_layer_are_misplaced() {
    let landing = Landing::default();
    let (bytes, reassembly) = layer(4 * BLOCK as usize, 5);
    landing.open(1, 0, reassembly);
    assert!(matches!(landing.land(&block(1, 0, 4, &bytes[..BLOCK as usize])), Landed::Misplaced(_)));
    assert!(matches!(landing.land(&block(1, 0, 0, &bytes[..10])), Landed::Misplaced(_)));
    assert_eq!(landing.missing(1, 0), vec![(0, 4)]);
}

#[test]
fn a_reservation_is_filled_in_place_and_an_abandoned_one_gives_its_blocks_back() {
    let landing = Landing::default();
    let (bytes, reassembly) = layer(6 * BLOCK as usize + 10, 6);
    landing.open(1, 0, reassembly);
    let b = BLOCK as usize;
    // Blocks 0..3 reserved, then again: nothing left to reserve there.
    let mut first = landing.reserve(&header(1, 0, 0), 3 * b).expect("missing blocks");
    assert!(landing.reserve(&header(1, 0, 0), 3 * b).is_none());
    assert_eq!(landing.missing(1, 0), vec![(3, 4)], "reserved blocks are not re-pulled");
    first.as_mut().copy_from_slice(&bytes[..3 * b]);
    assert_eq!(landing.fill(first, crc32fast::hash(&bytes[..3 * b])), Landed::Stored);
    // A reservation dropped unfilled (corrupt data, a cut stream): its blocks are missing again.
    let dropped = landing.reserve(&header(1, 0, 3), 3 * b).expect("missing blocks");
    drop(dropped);
    assert_eq!(landing.missing(1, 0), vec![(3, 4)]);
    // A piece over received and missing blocks is not reserved (it lands the usual way), nor
    // one that leaves the layer, nor one of a layer not open.
    assert!(landing.reserve(&header(1, 0, 2), 2 * b).is_none());
    assert_eq!(landing.missing(1, 0), vec![(3, 4)], "nothing stays claimed");
    assert!(landing.reserve(&header(1, 0, 5), 3 * b).is_none());
    assert!(landing.reserve(&header(2, 0, 3), 3 * b).is_none());
    let mut last = landing.reserve(&header(1, 0, 3), 3 * b + 10).expect("missing blocks");
    last.as_mut().copy_from_slice(&bytes[3 * b..]);
    assert_eq!(landing.fill(last, crc32fast::hash(&bytes[3 * b..])), Landed::Completed);
    let received = landing.take(1, 0).unwrap();
    assert_eq!(received.bytes(), &bytes[..]);
    assert_eq!(received.checksum(), received.crc);
}

#[test]
fn a_reservation_outlives_its_closed_request() {
    let landing = Landing::default();
    let (bytes, reassembly) = layer(2 * BLOCK as usize, 7);
    landing.open(1, 0, reassembly);
    let mut reserved = landing.reserve(&header(1, 0, 0), bytes.len()).expect("missing blocks");
    landing.close(1);
    // The layer is unlisted but its buffer lives on while the reader writes into it.
    reserved.as_mut().copy_from_slice(&bytes);
    assert_eq!(landing.fill(reserved, crc32fast::hash(&bytes)), Landed::Completed);
    assert!(landing.take(1, 0).is_none());
}
