//! Messages and layer states: every kind round-trips; malformed payloads are typed errors.

use burn_kvcompress::cache::{Bytes, LayerState, StateDType, StateTensor};
use burn_kvtransfer::{
    protocol::HeldLayer,
    state_codec::{decode_state, encode_state, EncodedState, DATA_ALIGN},
    transport::Slices,
    wire::{
        BlockFrame, BlockRange, ErrorCode, Frame, FrameCodec, FrameKind, Layout, Message, MessageError, Mode,
        ModelShape,
    },
    ModelFingerprint, SchemeDescriptor,
};

const CODEC: FrameCodec = FrameCodec { max_payload: 1 << 20 };

fn round_trip(message: Message) {
    let bytes = message.encode(&CODEC).unwrap();
    let (frame, used) = CODEC.decode(&bytes).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(Message::decode(frame).unwrap(), message);
}

#[test]
fn every_message_round_trips() {
    let descriptor = SchemeDescriptor { scheme: "dense".into(), model: ModelFingerprint::of_bytes(b"x") };
    let shape = ModelShape { num_layers: 30, kv_heads: 3, heads: 9, head_dim: 64, vocab: 49152 };
    round_trip(Message::Hello { descriptor: descriptor.clone(), mode: Mode::Push, session: u64::MAX });
    round_trip(Message::Hello { descriptor, mode: Mode::Read, session: 1 });
    round_trip(Message::Agent { metadata: vec![0, 255, 7] });
    round_trip(Message::Agent { metadata: Vec::new() });
    round_trip(Message::Attach { session: 42 });
    round_trip(Message::Layout(Layout { block_size: 1 << 18, shape }));
    round_trip(Message::Submit { request: u64::MAX, tokens: vec![0, 1, u32::MAX] });
    round_trip(Message::Ready { request: 3, layer: 29, bytes: 1 << 40, crc: 7 });
    round_trip(Message::ReadyAt { request: 3, layer: 29, bytes: 1 << 40, crc: 7, address: u64::MAX });
    round_trip(Message::Done { request: 3, logits: vec![1.5, -0.0, f32::INFINITY] });
    round_trip(Message::Pull(vec![
        BlockRange { request: 1, layer: 2, first: 3, count: 4 },
        BlockRange { request: 5, layer: 6, first: 7, count: 8 },
    ]));
    round_trip(Message::Complete { request: 9 });
    round_trip(Message::Error { code: ErrorCode::UnknownRequest, request: 0, message: "gone ✓".into() });
    let block = BlockFrame::encode(&CODEC, 1, 2, 3, &[7; 100]).unwrap();
    match Message::decode(CODEC.decode(&block).unwrap().unwrap().0).unwrap() {
        Message::Block(b) => assert_eq!((b.request, b.layer, b.first, b.data()), (1, 2, 3, &[7u8; 100][..])),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_payloads_are_typed_errors() {
    let frame = |kind, payload: &[u8]| Frame::new(kind, payload.to_vec());
    assert!(matches!(
        Message::decode(frame(FrameKind::Complete, &[1, 2, 3])),
        Err(MessageError::Truncated { field: "request", .. })
    ));
    assert_eq!(Message::decode(frame(FrameKind::Complete, &[0; 9])), Err(MessageError::Trailing(1)));
    // A count of 2^32 - 1 pull ranges in a 4-byte payload: refused before allocating.
    assert!(matches!(
        Message::decode(frame(FrameKind::Pull, &u32::MAX.to_le_bytes())),
        Err(MessageError::Truncated { field: "ranges", .. })
    ));
    assert!(matches!(Message::decode(frame(FrameKind::Block, &[0; 15])), Err(MessageError::Truncated { .. })));
    let mut error = vec![99];
    error.extend([0; 12]);
    assert!(matches!(
        Message::decode(frame(FrameKind::Error, &error)),
        Err(MessageError::Invalid { field: "error code", .. })
    ));
    let mut layout = 0u32.to_le_bytes().to_vec();
    layout.extend([1; 20]);
    assert!(matches!(
        Message::decode(frame(FrameKind::Layout, &layout)),
        Err(MessageError::Invalid { field: "block_size", .. })
    ));
}

fn state() -> LayerState {
    LayerState {
        tokens: 3,
        tensors: vec![
            StateTensor {
                name: "k".into(),
                dtype: StateDType::F32,
                shape: vec![1, 2, 3, 4],
                bytes: vec![5; 96].into(),
            },
            StateTensor { name: "codes".into(), dtype: StateDType::I32, shape: vec![7], bytes: vec![6; 28].into() },
            StateTensor { name: "empty".into(), dtype: StateDType::F32, shape: vec![0, 4], bytes: Bytes::new() },
        ],
    }
}

#[test]
fn layer_states_round_trip_and_every_truncation_fails() {
    let bytes = Bytes::from(encode_state(&state()));
    assert_eq!(decode_state(bytes.clone()).unwrap(), state());
    for cut in 0..bytes.len() {
        assert!(decode_state(bytes.slice(..cut)).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert_eq!(decode_state(longer.into()), Err(MessageError::Trailing(1)));
}

#[test]
fn decoded_tensors_are_slices_of_the_received_buffer() {
    let bytes = Bytes::from(encode_state(&state()));
    let received = bytes.as_ptr_range();
    for tensor in decode_state(bytes.clone()).unwrap().tensors.iter().filter(|t| !t.bytes.is_empty()) {
        assert!(received.contains(&tensor.bytes.as_ptr()), "`{}` was copied out of the buffer", tensor.name);
    }
}

#[test]
fn each_tensor_starts_at_an_aligned_offset_after_zero_padding() {
    let bytes = Bytes::from(encode_state(&state()));
    let start = bytes.as_ptr() as usize;
    for tensor in decode_state(bytes.clone()).unwrap().tensors.iter().filter(|t| !t.bytes.is_empty()) {
        let offset = tensor.bytes.as_ptr() as usize - start;
        assert_eq!(offset % DATA_ALIGN, 0, "`{}` starts at byte {offset}", tensor.name);
    }
    // The first tensor's padding: after tokens (8), count (4), name (4 + 1), dtype and rank (2),
    // four dims (32) and the data length (4), 55 bytes, up to 64.
    let mut padded = bytes.to_vec();
    assert!(padded[55..64].iter().all(|&b| b == 0));
    padded[60] = 1;
    assert!(matches!(decode_state(padded.into()), Err(MessageError::Invalid { field: "data padding", .. })));
}

#[test]
fn inconsistent_states_are_rejected() {
    let mut wrong_size = state();
    wrong_size.tensors[0].shape = vec![1, 2, 3, 5];
    assert!(matches!(decode_state(encode_state(&wrong_size).into()), Err(MessageError::Invalid { field: "data", .. })));
    let mut bytes = encode_state(&state());
    // The dtype byte of the first tensor: after tokens (8), count (4), name length (4) and "k".
    bytes[17] = 9;
    assert!(matches!(decode_state(bytes.into()), Err(MessageError::Invalid { field: "dtype", .. })));
    let mut huge = state();
    huge.tensors[1].shape = vec![usize::MAX, 2];
    assert!(decode_state(encode_state(&huge).into()).is_err());
}

#[test]
fn any_byte_range_of_an_encoded_state_reads_across_its_parts() {
    let encoded = EncodedState::new(state());
    let flat = encoded.to_vec();
    assert_eq!((encoded.len(), encoded.crc()), (flat.len(), crc32fast::hash(&flat)));
    for start in (0..flat.len()).step_by(7) {
        for end in (start..=flat.len()).step_by(13) {
            assert_eq!(encoded.slices(start, end).concat(), &flat[start..end], "{start}..{end}");
        }
    }
}

#[test]
fn a_held_layer_combines_block_checksums_into_any_range_and_the_whole() {
    let flat = EncodedState::new(state()).to_vec();
    for block_size in [1, 7, 64, 1000] {
        let held = HeldLayer::new(EncodedState::new(state()), block_size);
        assert_eq!((held.len(), held.crc()), (flat.len(), crc32fast::hash(&flat)), "block size {block_size}");
        let blocks = flat.len().div_ceil(block_size as usize) as u32;
        for (first, count) in [(0, 1), (1, 2), (blocks - 1, 1), (2, blocks)].into_iter().filter(|&(f, _)| f < blocks) {
            let start = (first * block_size) as usize;
            let end = (start + (count * block_size) as usize).min(flat.len());
            assert_eq!(held.range_crc(first, count), crc32fast::hash(&flat[start..end]), "{first}+{count}");
        }
    }
}
