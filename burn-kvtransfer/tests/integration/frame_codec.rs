//! The frame codec: round trips, incremental decoding, and every corruption detected.

use burn_kvtransfer::wire::{
    crc_concat, crc_suffix, Frame, FrameCodec, FrameKind, WireError, HEADER_LEN, MAGIC, VERSION,
};

const CODEC: FrameCodec = FrameCodec { max_payload: 1 << 20 };

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + 7) as u8).collect()
}

#[test]
fn round_trips_back_to_back_frames_in_a_stream() {
    let frames = [(FrameKind::Hello, payload(0)), (FrameKind::Block, payload(1000)), (FrameKind::Complete, payload(9))];
    let mut stream = Vec::new();
    for (kind, p) in &frames {
        stream.extend(CODEC.encode(*kind, p).unwrap());
    }
    let mut at = 0;
    for (kind, p) in &frames {
        let (frame, used) = CODEC.decode(&stream[at..]).unwrap().expect("whole frame");
        assert_eq!(frame, Frame::new(*kind, p.clone()));
        at += used;
    }
    assert_eq!(at, stream.len());
}

#[test]
fn every_truncation_asks_for_more_bytes() {
    let bytes = CODEC.encode(FrameKind::Block, &payload(100)).unwrap();
    for cut in 0..bytes.len() {
        assert_eq!(CODEC.decode(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
    assert!(CODEC.decode(&bytes).unwrap().is_some());
}

#[test]
fn every_single_bit_flip_is_detected() {
    let bytes = CODEC.encode(FrameKind::Layout, &payload(64)).unwrap();
    for bit in 0..bytes.len() * 8 {
        let mut corrupt = bytes.clone();
        corrupt[bit / 8] ^= 1 << (bit % 8);
        let result = CODEC.decode(&corrupt);
        assert!(result.is_err(), "flip of bit {bit} went unnoticed: {result:?}");
        if bit / 8 >= HEADER_LEN {
            assert_eq!(result, Err(WireError::PayloadChecksum), "bit {bit}");
        }
    }
}

/// A valid header for a given version, kind, flags and length (checksum recomputed).
fn header(version: u16, kind: u8, flags: u8, len: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend(version.to_le_bytes());
    h.extend([kind, flags]);
    h.extend(len.to_le_bytes());
    let crc = crc32(&h);
    h.extend(crc.to_le_bytes());
    h
}

fn crc32(bytes: &[u8]) -> u32 {
    // Bitwise CRC-32 (IEEE, reflected): an independent check of the codec's checksum.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn header_checksum_is_standard_crc32() {
    let bytes = CODEC.encode(FrameKind::Pull, &payload(5)).unwrap();
    assert_eq!(&bytes[..HEADER_LEN], header(VERSION, 3, 0, 5).as_slice());
}

#[test]
fn hostile_or_foreign_headers_are_rejected_before_the_payload() {
    // A 4 GiB length with a valid checksum: refused from the header alone.
    assert_eq!(
        CODEC.decode(&header(VERSION, 4, 0, u32::MAX)),
        Err(WireError::PayloadTooLarge { len: u32::MAX, max: 1 << 20 })
    );
    let other = VERSION + 1;
    assert_eq!(
        CODEC.decode(&header(other, 4, 0, 0)),
        Err(WireError::UnsupportedVersion { found: other, supported: VERSION })
    );
    assert_eq!(CODEC.decode(&header(VERSION, 0xEE, 0, 0)), Err(WireError::UnknownKind(0xEE)));
    assert_eq!(CODEC.decode(&header(VERSION, 4, 0x80, 0)), Err(WireError::ReservedFlags(0x80)));
    assert_eq!(CODEC.decode(b"GET / HTTP/1.1\r\n\r\n"), Err(WireError::BadMagic(*b"GET ")));
    assert_eq!(
        FrameCodec::new(8).encode(FrameKind::Block, &payload(9)),
        Err(WireError::PayloadTooLarge { len: 9, max: 8 })
    );
}

#[test]
fn checksums_of_concatenations_and_suffixes_follow_without_the_bytes() {
    let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
    for cut in [0, 1, 24, 1000, 4999, 5000] {
        let (a, b) = bytes.split_at(cut);
        let (whole, crc_a, crc_b) = (crc32(&bytes), crc32(a), crc32(b));
        assert_eq!(crc_concat(crc_a, crc_b, b.len()), whole, "concat at {cut}");
        assert_eq!(crc_suffix(whole, crc_a, b.len()), crc_b, "suffix at {cut}");
    }
}
