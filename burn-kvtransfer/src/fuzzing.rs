//! Fuzzing support shared by the `cargo fuzz` target (`frame_decoder` in the workspace's `fuzz/`),
//! the stable-Rust driver (`examples/fuzz_frames.rs`) and the smoke test: [`decode_any`] runs
//! every decoder of peer input on arbitrary bytes and checks their round-trip properties;
//! [`Mutator`] makes inputs that get past the checksums (mutated payloads re-wrapped in valid
//! frames), so the message and state parsers see them; its byte mutations also serve the
//! workspace's other fuzz targets, over their own corpora.

use burn_kvcompress::cache::{Bytes, LayerState, StateDType, StateTensor};

use crate::descriptor::{ModelFingerprint, SchemeDescriptor};
use crate::state_codec::{decode_state, encode_state};
use crate::wire::{
    BlockFrame, BlockRange, ErrorCode, FrameCodec, FrameKind, Layout, Message, Mode, ModelShape, HEADER_LEN, MAGIC,
    TRAILER_LEN, VERSION,
};

/// The payload cap used while fuzzing.
pub const FUZZ_MAX_PAYLOAD: u32 = 1 << 16;

/// What [`decode_any`] found in its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Whole frames decoded from the start of the input.
    pub frames: usize,
    /// Of those, messages that parsed.
    pub messages: usize,
    /// Whether the input parsed as a layer state.
    pub state: bool,
}

/// Decodes `data` as a stream of frames (and each frame as a message) and as a layer state.
/// Panics only if a decoder breaks a property: a frame or message that decodes must re-encode to
/// exactly the bytes it came from, and a decoded state likewise.
pub fn decode_any(data: &[u8]) -> Outcome {
    let codec = FrameCodec::new(FUZZ_MAX_PAYLOAD);
    let mut outcome = Outcome::default();
    let mut at = 0;
    while let Ok(Some((frame, used))) = codec.decode(&data[at..]) {
        let bytes = &data[at..at + used];
        assert!((HEADER_LEN + TRAILER_LEN..=FUZZ_MAX_PAYLOAD as usize + HEADER_LEN + TRAILER_LEN).contains(&used));
        assert_eq!(codec.encode(frame.kind, &frame.payload).expect("within the cap"), bytes, "frame round trip");
        if let Ok(message) = Message::decode(frame) {
            assert_eq!(message.encode(&codec).expect("within the cap"), bytes, "message round trip");
            outcome.messages += 1;
        }
        outcome.frames += 1;
        at += used;
    }
    if let Ok(state) = decode_state(Bytes::copy_from_slice(data)) {
        assert_eq!(encode_state(&state), data, "state round trip");
        outcome.state = true;
    }
    outcome
}

/// A deterministic generator of fuzz inputs from a seed corpus of valid frames and states.
#[derive(Debug, Clone)]
pub struct Mutator {
    rng: u64,
    corpus: Vec<Vec<u8>>,
}

impl Mutator {
    /// A mutator seeded with `seed`, over [`seed_corpus`].
    pub fn new(seed: u64) -> Self {
        Self::with_corpus(seed, seed_corpus())
    }

    /// A mutator seeded with `seed` over `corpus` (which must not be empty).
    pub fn with_corpus(seed: u64, corpus: Vec<Vec<u8>>) -> Self {
        assert!(!corpus.is_empty(), "a mutator needs a corpus");
        Self { rng: seed | 1, corpus }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn pick(&mut self) -> Vec<u8> {
        let i = self.below(self.corpus.len());
        self.corpus[i].clone()
    }

    /// Applies one to four random mutations to `bytes`: a bit flipped, a byte or a 4-byte field
    /// set to an extreme value, a cut, random bytes inserted, or the tail replaced by the tail of
    /// another corpus entry.
    pub fn mutate(&mut self, bytes: &mut Vec<u8>) {
        for _ in 0..1 + self.below(4) {
            match self.below(6) {
                0 if !bytes.is_empty() => {
                    let i = self.below(bytes.len());
                    bytes[i] ^= 1 << self.below(8);
                }
                1 if !bytes.is_empty() => {
                    let i = self.below(bytes.len());
                    bytes[i] = [0, 0xFF, 0x7F, 0x80, 1][self.below(5)];
                }
                2 => bytes.truncate(self.below(bytes.len() + 1)),
                3 => {
                    let extra = self.below(16);
                    let tail: Vec<u8> = (0..extra).map(|_| self.next_u64() as u8).collect();
                    let at = self.below(bytes.len() + 1);
                    bytes.splice(at..at, tail);
                }
                4 if bytes.len() >= 4 => {
                    // Overwrite a 4-byte field with an extreme value (lengths, counts).
                    let i = self.below(bytes.len() - 3);
                    let v = [u32::MAX, 0, 1 << 31, 1 << 16, 3][self.below(5)];
                    bytes[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
                _ => {
                    let other = self.pick();
                    let at = self.below(bytes.len() + 1);
                    bytes.truncate(at);
                    bytes.extend_from_slice(&other[self.below(other.len() + 1)..]);
                }
            }
        }
    }

    /// The next input: a corpus entry mutated raw, or its payload mutated and re-wrapped in a
    /// frame with valid checksums (possibly of another kind or claiming another length).
    pub fn next_input(&mut self) -> Vec<u8> {
        let mut input = self.pick();
        if self.below(3) == 0 || input.len() < HEADER_LEN + TRAILER_LEN || input[..4] != MAGIC {
            self.mutate(&mut input);
            return input;
        }
        let mut payload = input[HEADER_LEN..input.len() - TRAILER_LEN].to_vec();
        self.mutate(&mut payload);
        let kind = match self.below(8) {
            0 => 1 + self.below(12) as u8,
            _ => input[6],
        };
        let mut header = MAGIC.to_vec();
        header.extend(VERSION.to_le_bytes());
        header.extend([kind, 0]);
        let len = match self.below(10) {
            0 => self.next_u64() as u32,
            _ => payload.len() as u32,
        };
        header.extend(len.to_le_bytes());
        let crc = crc32fast::hash(&header);
        header.extend(crc.to_le_bytes());
        header.extend(&payload);
        header.extend(crc32fast::hash(&payload).to_le_bytes());
        header
    }
}

/// Valid encodings of every message kind and of a few layer states.
pub fn seed_corpus() -> Vec<Vec<u8>> {
    let codec = FrameCodec::new(FUZZ_MAX_PAYLOAD);
    let descriptor = SchemeDescriptor { scheme: "hack:bits=2,pi=64".into(), model: ModelFingerprint::of_bytes(b"m") };
    let shape = ModelShape { num_layers: 30, kv_heads: 3, heads: 9, head_dim: 64, vocab: 49152 };
    let messages = [
        Message::Hello { descriptor: descriptor.clone(), mode: Mode::Pull, session: 0x5E55 },
        Message::Hello { descriptor, mode: Mode::Read, session: 0x5E56 },
        Message::Agent { metadata: b"nixl agent metadata".to_vec() },
        Message::Attach { session: 0x5E55 },
        Message::Layout(Layout { block_size: 4096, shape }),
        Message::Submit { request: 7, tokens: vec![1, 2, 3, 4] },
        Message::Ready { request: 7, layer: 3, bytes: 10_000, crc: 0xDEAD_BEEF },
        Message::ReadyAt { request: 7, layer: 4, bytes: 10_000, crc: 0xDEAD_BEEF, address: 0x7F00_0000_1000 },
        Message::Done { request: 7, logits: vec![0.5, -1.0, 3.25] },
        Message::Pull(vec![BlockRange { request: 7, layer: 1, first: 2, count: 3 }]),
        Message::Complete { request: 7 },
        Message::Error { code: ErrorCode::Refused, request: 7, message: "no".into() },
    ];
    let mut corpus: Vec<Vec<u8>> = messages.iter().map(|m| m.encode(&codec).expect("small")).collect();
    corpus.push(BlockFrame::encode(&codec, 7, 1, 2, &[9; 300]).expect("small"));
    let state = LayerState {
        tokens: 2,
        tensors: vec![
            StateTensor {
                name: "k".into(),
                dtype: StateDType::F32,
                shape: vec![1, 1, 2, 2],
                bytes: vec![1; 16].into(),
            },
            StateTensor { name: "codes".into(), dtype: StateDType::I32, shape: vec![3], bytes: vec![2; 12].into() },
        ],
    };
    corpus.push(encode_state(&state));
    corpus.push(encode_state(&LayerState::default()));
    let framed_state = codec.encode(FrameKind::Block, &encode_state(&state)).expect("small");
    corpus.push(framed_state);
    corpus
}
