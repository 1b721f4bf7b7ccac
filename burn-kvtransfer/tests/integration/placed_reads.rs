//! Block data read straight into place (`FrameReader::next_placed`): large Block frames land in
//! the target the caller names, everything else is read as usual, and corrupt or cut data is
//! reported as by `next`.

use burn_kvtransfer::{
    error::TransferError,
    transport::{FrameReader, Placed, WireCounter},
    wire::{BlockFrame, FrameCodec, FrameKind, Message, BLOCK_HEADER_LEN},
};
use tokio::io::AsyncWriteExt;

const CODEC: FrameCodec = FrameCodec { max_payload: 4 << 20 };

/// Over the reader's 256 KiB buffer, and not a multiple of anything.
const LARGE: usize = 700_001;

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

/// A reader over `bytes`, delivered in 4 KiB writes (so frames straddle reads), then the end.
fn reader(bytes: Vec<u8>) -> FrameReader<tokio::io::DuplexStream> {
    let (mut tx, rx) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        for chunk in bytes.chunks(4096) {
            tx.write_all(chunk).await.unwrap();
        }
    });
    FrameReader::new(rx, CODEC, WireCounter::default())
}

/// Places every large Block frame in a fresh vector of the asked length.
fn fresh(_: &[u8; BLOCK_HEADER_LEN], len: usize) -> Option<Vec<u8>> {
    Some(vec![0; len])
}

#[tokio::test]
async fn large_block_data_goes_to_the_target_and_other_frames_are_read_as_usual() {
    let (big, small) = (data(LARGE, 1), data(1000, 2));
    let mut stream = BlockFrame::encode(&CODEC, 7, 3, 11, &big).unwrap();
    stream.extend(BlockFrame::encode(&CODEC, 7, 3, 0, &small).unwrap());
    stream.extend(Message::Complete { request: 7 }.encode(&CODEC).unwrap());
    stream.extend(Message::Done { request: 7, logits: vec![0.5; 100_000] }.encode(&CODEC).unwrap());
    stream.extend(BlockFrame::encode(&CODEC, 8, 0, 0, &big).unwrap());
    let mut reader = reader(stream);

    match reader.next_placed(fresh).await.unwrap() {
        Placed::Block { header, target, data_crc } => {
            assert_eq!(BlockFrame::parse_header(&header), (7, 3, 11));
            assert_eq!(target, big);
            assert_eq!(data_crc, crc32fast::hash(&big));
        }
        other => panic!("{other:?}"),
    }
    // A small Block frame, a small message and a large non-Block frame are read whole.
    for expected in [FrameKind::Block, FrameKind::Complete, FrameKind::Done] {
        match reader.next_placed(fresh).await.unwrap() {
            Placed::Frame(frame) => assert_eq!(frame.kind, expected),
            other => panic!("{other:?}"),
        }
    }
    // A large Block frame the caller does not place is read whole too.
    match reader.next_placed(|_, _| None::<Vec<u8>>).await.unwrap() {
        Placed::Frame(frame) => match Message::decode(frame).unwrap() {
            Message::Block(block) => assert_eq!(block.data(), &big[..]),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert!(matches!(reader.next_placed(fresh).await, Err(TransferError::Closed)));
}

#[tokio::test]
async fn corrupt_placed_data_is_reported_and_the_next_frame_still_reads() {
    let big = data(LARGE, 3);
    let mut stream = BlockFrame::encode(&CODEC, 1, 0, 0, &big).unwrap();
    stream[300_000] ^= 0x40;
    stream.extend(BlockFrame::encode(&CODEC, 1, 0, 0, &big).unwrap());
    let mut reader = reader(stream);
    assert!(matches!(reader.next_placed(fresh).await, Err(TransferError::Corrupt(FrameKind::Block))));
    assert!(matches!(reader.next_placed(fresh).await.unwrap(), Placed::Block { target, .. } if target == big));
}

#[tokio::test]
async fn a_stream_cut_inside_placed_data_or_its_trailer_is_truncated() {
    let frame = BlockFrame::encode(&CODEC, 1, 0, 0, &data(LARGE, 4)).unwrap();
    for cut in [100_000, frame.len() - 2] {
        let mut reader = reader(frame[..cut].to_vec());
        assert!(matches!(reader.next_placed(fresh).await, Err(TransferError::Truncated(_))), "cut at {cut}");
    }
}

#[tokio::test]
async fn a_target_of_the_wrong_length_is_an_error_not_a_partial_read() {
    let frame = BlockFrame::encode(&CODEC, 1, 0, 0, &data(LARGE, 5)).unwrap();
    let mut reader = reader(frame);
    let short = |_: &[u8; BLOCK_HEADER_LEN], len: usize| Some(vec![0; len - 1]);
    assert!(matches!(reader.next_placed(short).await, Err(TransferError::Protocol(_))));
}
