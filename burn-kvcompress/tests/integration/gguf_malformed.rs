//! The GGUF reader on files built in the test: a well-formed one (typed getters, tensor lookup)
//! and malformed ones, each of which must give its specific typed error without panicking and
//! without allocating from an unchecked length field.

use burn_kvcompress::gguf::{GgmlType, GgufError, GgufFile, MetadataArray, MetadataValue, ValueType};

// ---- a tiny GGUF writer, for tests only ----

const T_U8: u32 = 0;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

fn enc_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Builds GGUF bytes field by field; counts can be overridden to lie.
struct Builder {
    magic: [u8; 4],
    version: u32,
    kvs: Vec<Vec<u8>>,
    tensors: Vec<Vec<u8>>,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    alignment: usize,
    data: Vec<u8>,
}

impl Builder {
    fn new() -> Self {
        Self {
            magic: *b"GGUF",
            version: 3,
            kvs: vec![],
            tensors: vec![],
            n_tensors: None,
            n_kv: None,
            alignment: 32,
            data: vec![],
        }
    }
    fn kv_raw(mut self, key: &str, type_id: u32, value: &[u8]) -> Self {
        let mut kv = Vec::new();
        enc_str(&mut kv, key);
        kv.extend_from_slice(&type_id.to_le_bytes());
        kv.extend_from_slice(value);
        self.kvs.push(kv);
        self
    }
    fn kv_u32(self, key: &str, v: u32) -> Self {
        self.kv_raw(key, T_U32, &v.to_le_bytes())
    }
    fn kv_str(self, key: &str, v: &str) -> Self {
        let mut b = Vec::new();
        enc_str(&mut b, v);
        self.kv_raw(key, T_STRING, &b)
    }
    fn kv_array(self, key: &str, elem: u32, n: u64, body: &[u8]) -> Self {
        let mut b = elem.to_le_bytes().to_vec();
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(body);
        self.kv_raw(key, T_ARRAY, &b)
    }
    fn tensor(mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Self {
        let mut t = Vec::new();
        enc_str(&mut t, name);
        t.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            t.extend_from_slice(&d.to_le_bytes());
        }
        t.extend_from_slice(&type_id.to_le_bytes());
        t.extend_from_slice(&offset.to_le_bytes());
        self.tensors.push(t);
        self
    }
    fn data(mut self, bytes: &[u8]) -> Self {
        self.data.extend_from_slice(bytes);
        self
    }
    fn build(&self) -> Vec<u8> {
        let mut out = self.magic.to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.n_tensors.unwrap_or(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.n_kv.unwrap_or(self.kvs.len() as u64).to_le_bytes());
        for kv in &self.kvs {
            out.extend_from_slice(kv);
        }
        for t in &self.tensors {
            out.extend_from_slice(t);
        }
        while !out.len().is_multiple_of(self.alignment) {
            out.push(0);
        }
        out.extend_from_slice(&self.data);
        out
    }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small well-formed file: assorted metadata, an F32 tensor with ne = [3, 2] and a one-block
/// Q8_0 tensor with d = 0.5 and q = -16..16.
fn valid() -> Builder {
    let mut q8 = half::f16::from_f32(0.5).to_bits().to_le_bytes().to_vec();
    q8.extend((-16i8..16).map(|q| q as u8));
    let mut data = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    data.resize(32, 0);
    data.extend_from_slice(&q8);
    let strs = {
        let mut b = Vec::new();
        for s in ["<s>", "hello", "ĠWorld"] {
            enc_str(&mut b, s);
        }
        b
    };
    let i32s: Vec<u8> = [1i32, -3, 4].iter().flat_map(|x| x.to_le_bytes()).collect();
    Builder::new()
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 30)
        .kv_raw("small", T_U8, &[7])
        .kv_raw("negative", T_I32, &(-5i32).to_le_bytes())
        .kv_raw("big", T_I64, &(1i64 << 40).to_le_bytes())
        .kv_raw("eps", T_F32, &1e-5f32.to_le_bytes())
        .kv_raw("theta", T_F64, &1e4f64.to_le_bytes())
        .kv_raw("flag", T_BOOL, &[1])
        .kv_array("tokens", T_STRING, 3, &strs)
        .kv_array("types", T_I32, 3, &i32s)
        .kv_array("empty_u8", T_U8, 0, &[])
        .tensor("a", &[3, 2], GgmlType::F32.id(), 0)
        .tensor("b", &[32], GgmlType::Q8_0.id(), 32)
        .data(&data)
}

fn open(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(bytes)
}

// ---- the well-formed file ----

#[test]
fn valid_file_metadata_and_getters() {
    let f = open(valid().build()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.metadata().len(), 11);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u32("small").unwrap(), 7);
    assert!(matches!(f.get_u32("negative"), Err(GgufError::ValueOutOfRange { .. })));
    assert!(matches!(f.get_u32("big"), Err(GgufError::ValueOutOfRange { .. })));
    assert_eq!(f.get_u64("big").unwrap(), 1 << 40);
    assert_eq!(f.get_f32("eps").unwrap(), 1e-5);
    assert_eq!(f.get_f32("theta").unwrap(), 1e4);
    assert!(f.get_bool("flag").unwrap());
    assert_eq!(f.get_str_array("tokens").unwrap(), ["<s>", "hello", "ĠWorld"]);
    assert_eq!(f.get_i32_array("types").unwrap(), vec![1, -3, 4]);
    assert_eq!(f.get("empty_u8"), Some(&MetadataValue::Array(MetadataArray::U8(vec![]))));
    assert_eq!(f.get("flag").unwrap().value_type(), ValueType::Bool);

    assert!(matches!(f.get_u32("nope"), Err(GgufError::MissingKey(k)) if k == "nope"));
    assert!(matches!(
        f.get_str("llama.block_count"),
        Err(GgufError::WrongValueType { expected: "string", found: "u32", .. })
    ));
    assert!(matches!(f.get_i32_array("tokens"), Err(GgufError::WrongValueType { found: "array of string", .. })));
    assert!(matches!(f.get_f32("llama.block_count"), Err(GgufError::WrongValueType { .. })));
    assert_eq!(f.opt_u32("nope").unwrap(), None);
    assert_eq!(f.opt_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(f.opt_f32("eps").unwrap(), Some(1e-5));
    assert!(f.opt_u32("general.architecture").is_err());
}

#[test]
fn valid_file_tensors() {
    let f = open(valid().build()).unwrap();
    assert_eq!(f.tensor_infos().len(), 2);
    let a = f.tensor_info("a").unwrap();
    assert_eq!((a.dims.as_slice(), a.ggml_type, a.offset), (&[3u64, 2][..], GgmlType::F32, 0));
    let (v, shape) = f.tensor_f32("a").unwrap();
    assert_eq!(shape, vec![2, 3], "shape is reversed ne: outermost first");
    assert_eq!(v, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let (v, shape) = f.tensor_f32("b").unwrap();
    assert_eq!(shape, vec![32]);
    let expected: Vec<f32> = (-16..16).map(|q| q as f32 / 2.0).collect();
    assert_eq!(v, expected);
    assert!(matches!(f.tensor_f32("c"), Err(GgufError::MissingTensor(n)) if n == "c"));
}

#[test]
fn version_2_and_custom_alignment_are_read() {
    let mut b = valid();
    b.version = 2;
    assert_eq!(open(b.build()).unwrap().version(), 2);

    let mut b = Builder::new()
        .kv_u32("general.alignment", 64)
        .tensor("x", &[2], GgmlType::F32.id(), 0)
        .data(&f32s(&[1.5, -2.5]));
    b.alignment = 64;
    let bytes = b.build();
    let f = open(bytes.clone()).unwrap();
    assert_eq!((f.alignment(), f.data_offset() % 64), (64, 0));
    assert_eq!(f.tensor_f32("x").unwrap().0, vec![1.5, -2.5]);
}

#[test]
fn open_reads_from_disk() {
    let path = std::env::temp_dir().join(format!("gguf_malformed_{}.gguf", std::process::id()));
    std::fs::write(&path, valid().build()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.tensor_f32("a").unwrap().1, vec![2, 3]);
    drop(f);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(GgufFile::open(&path), Err(GgufError::Io(_))));
    // An empty file maps (or fails to) without panicking.
    std::fs::write(&path, b"").unwrap();
    let r = GgufFile::open(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(r, Err(GgufError::Truncated { what: "magic", offset: 0 } | GgufError::Io(_))), "{r:?}");
}

// ---- malformed files ----

#[test]
fn bad_magic() {
    let mut b = valid();
    b.magic = *b"GGML";
    assert!(matches!(open(b.build()), Err(GgufError::BadMagic { found }) if &found == b"GGML"));
    assert!(matches!(open(b"GG".to_vec()), Err(GgufError::Truncated { what: "magic", offset: 0 })));
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 99] {
        let mut b = valid();
        b.version = v;
        assert!(matches!(open(b.build()), Err(GgufError::UnsupportedVersion(x)) if x == v), "version {v}");
    }
    let mut b = valid();
    b.version = 3u32.swap_bytes(); // how a big-endian v3 file reads little-endian
    assert!(matches!(open(b.build()), Err(GgufError::BigEndian { .. })));
}

#[test]
fn truncated_header() {
    let full = valid().build();
    // Cut inside the kv-count field.
    assert!(matches!(open(full[..20].to_vec()), Err(GgufError::Truncated { what: "metadata kv count", offset: 16 })));
    // Cut inside the tensor-count field.
    assert!(matches!(open(full[..12].to_vec()), Err(GgufError::Truncated { what: "tensor count", offset: 8 })));
    // Cut inside the last tensor info's offset field.
    let header_len = full.len() - valid().data.len();
    let b = valid();
    let infos_end = 24 + b.kvs.iter().map(Vec::len).sum::<usize>() + b.tensors.iter().map(Vec::len).sum::<usize>();
    assert!(matches!(open(full[..infos_end - 3].to_vec()), Err(GgufError::Truncated { what: "tensor offset", .. })));
    // Every prefix of the header fails cleanly (a typed error, never a panic).
    for n in 0..header_len {
        match open(full[..n].to_vec()) {
            Err(
                GgufError::Truncated { .. } | GgufError::LengthTooLarge { .. } | GgufError::TensorOutOfBounds { .. },
            ) => {}
            other => panic!("prefix of {n} bytes: unexpected {other:?}"),
        }
    }
}

#[test]
fn truncated_tensor_data() {
    let full = valid().build();
    let cut = full[..full.len() - 1].to_vec();
    let len = cut.len() as u64;
    match open(cut) {
        Err(GgufError::TensorOutOfBounds { name, end, file_len, .. }) => {
            assert_eq!((name.as_str(), end, file_len), ("b", len + 1, len));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn tensor_offset_beyond_file() {
    let b = Builder::new().tensor("far", &[4], GgmlType::F32.id(), 1 << 20).data(&f32s(&[0.0; 4]));
    assert!(matches!(open(b.build()), Err(GgufError::TensorOutOfBounds { name, .. }) if name == "far"));
    // An offset near u64::MAX must not wrap around.
    let b = Builder::new().tensor("wrap", &[4], GgmlType::F32.id(), u64::MAX - 31).data(&f32s(&[0.0; 4]));
    assert!(matches!(open(b.build()), Err(GgufError::SizeOverflow { .. })));
}

#[test]
fn huge_lengths_are_rejected_before_allocating() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("metadata key length", {
            let mut b = Builder::new().build();
            b.truncate(24); // drop the alignment padding
            b[16..24].copy_from_slice(&1u64.to_le_bytes()); // one kv...
            b.extend_from_slice(&u64::MAX.to_le_bytes()); // ...whose key claims 2^64-1 bytes
            b.extend_from_slice(&[0; 64]);
            b
        }),
        ("string length", Builder::new().kv_raw("s", T_STRING, &(1u64 << 40).to_le_bytes()).build()),
        ("array length", Builder::new().kv_array("a", T_U32, u64::MAX / 2, &[]).build()),
        ("array length", Builder::new().kv_array("a", T_STRING, 1 << 33, &[0; 64]).build()),
        ("tensor count", {
            let mut b = Builder::new();
            b.n_tensors = Some(u64::MAX);
            b.build()
        }),
        ("metadata kv count", {
            let mut b = Builder::new();
            b.n_kv = Some(1 << 50);
            b.build()
        }),
        ("tensor name length", {
            let mut b = Builder::new().build();
            b.truncate(24);
            b[8..16].copy_from_slice(&1u64.to_le_bytes());
            b.extend_from_slice(&(1u64 << 62).to_le_bytes());
            b.extend_from_slice(&[0; 32]);
            b
        }),
    ];
    for (what, bytes) in cases {
        let file_len = bytes.len() as u64;
        match open(bytes) {
            Err(GgufError::LengthTooLarge { what: w, len, limit }) => {
                assert_eq!(w, what);
                // The length was compared with what the rest of the file can hold.
                assert!(limit <= file_len && len > limit, "{what}: len {len}, limit {limit}");
            }
            other => panic!("{what}: unexpected {other:?}"),
        }
    }
}

#[test]
fn too_many_dims_and_deep_nesting() {
    let b = Builder::new().tensor("t", &[1, 1, 1, 1, 1], GgmlType::F32.id(), 0).data(&[0; 4]);
    assert!(matches!(open(b.build()), Err(GgufError::LengthTooLarge { what: "tensor n_dims", len: 5, limit: 4 })));
    // An array of arrays of arrays ... 100 deep.
    let mut body = Vec::new();
    for _ in 0..100 {
        body.extend_from_slice(&T_ARRAY.to_le_bytes());
        body.extend_from_slice(&1u64.to_le_bytes());
    }
    body.extend_from_slice(&T_U8.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes());
    let b = Builder::new().kv_raw("deep", T_ARRAY, &body);
    assert!(matches!(open(b.build()), Err(GgufError::LengthTooLarge { what: "array nesting depth", .. })));
}

#[test]
fn unknown_and_unsupported_tensor_types() {
    let b = Builder::new().tensor("t", &[32], 99, 0).data(&[0; 64]);
    assert!(matches!(open(b.build()), Err(GgufError::UnknownTensorType(99))));
    let b = Builder::new().tensor("t", &[32], 4, 0).data(&[0; 64]); // removed Q4_2
    assert!(matches!(open(b.build()), Err(GgufError::UnknownTensorType(4))));
    // A known type without a dequantizer opens, but cannot be read as f32.
    let b = Builder::new().tensor("t", &[256], GgmlType::Q2_K.id(), 0).data(&[0; 84]);
    let f = open(b.build()).unwrap();
    assert_eq!(f.tensor_data("t").unwrap().len(), 84);
    assert!(matches!(f.tensor_f32("t"), Err(GgufError::UnsupportedTensorType(GgmlType::Q2_K))));
}

#[test]
fn other_header_errors() {
    let b = Builder::new().kv_raw("k", 13, &[0; 8]);
    assert!(matches!(open(b.build()), Err(GgufError::UnknownValueType(13))));
    let mut bad = Vec::new();
    enc_str(&mut bad, "ok");
    let n = bad.len();
    bad[n - 1] = 0xFF;
    let b = Builder::new().kv_raw("k", T_STRING, &bad);
    assert!(matches!(open(b.build()), Err(GgufError::InvalidUtf8 { .. })));
    let b = Builder::new().kv_u32("k", 1).kv_u32("k", 2);
    assert!(matches!(open(b.build()), Err(GgufError::DuplicateKey(k)) if k == "k"));
    let b = Builder::new().tensor("t", &[1], 0, 0).tensor("t", &[1], 0, 32).data(&[0; 64]);
    assert!(matches!(open(b.build()), Err(GgufError::DuplicateTensor(t)) if t == "t"));
    let b = Builder::new().tensor("t", &[1], 0, 4).data(&[0; 64]);
    assert!(matches!(open(b.build()), Err(GgufError::MisalignedTensor { offset: 4, .. })));
    let b = Builder::new().kv_u32("general.alignment", 24);
    assert!(matches!(open(b.build()), Err(GgufError::BadAlignment(24))));
    let b = Builder::new().tensor("t", &[33], GgmlType::Q8_0.id(), 0).data(&[0; 64]);
    assert!(matches!(open(b.build()), Err(GgufError::ShapeMismatch { expected: 32, found: 33, .. })));
    let b = Builder::new().tensor("t", &[1 << 32, 1 << 32], GgmlType::F32.id(), 0);
    assert!(matches!(open(b.build()), Err(GgufError::SizeOverflow { .. })));
}

#[test]
fn an_empty_tensor_of_huge_dimensions_is_refused() {
    // No bytes, but the other dimensions multiply past i64 (found by fuzz target gguf_tables):
    // a product taken in another order, or a loop over the rows, would overflow or never end.
    for dims in [[0, 1 << 62, 1 << 62], [1 << 40, 1 << 40, 0]] {
        let b = Builder::new().tensor("t", &dims, GgmlType::F32.id(), 0);
        assert!(matches!(open(b.build()), Err(GgufError::SizeOverflow { .. })), "{dims:?}");
    }
    // Empty tensors whose other dimensions fit are read, as empty.
    let f = open(Builder::new().tensor("t", &[0, 1 << 40], GgmlType::F32.id(), 0).build()).unwrap();
    assert_eq!(f.tensor_f32("t").unwrap(), (vec![], vec![1 << 40, 0]));
}

#[test]
fn a_declared_context_beyond_the_rope_limit_is_refused_before_allocating() {
    use burn_kvcompress::{error::LoadError, loading::gguf_model_config};
    // A tiny model's metadata with the largest context a u32 holds: 2^32 positions of RoPE tables.
    let b = Builder::new()
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.embedding_length", 32)
        .kv_u32("llama.attention.head_count", 2)
        .kv_u32("llama.feed_forward_length", 32)
        .kv_u32("llama.block_count", 1)
        .kv_u32("llama.context_length", u32::MAX)
        .kv_raw("llama.attention.layer_norm_rms_epsilon", T_F32, &1e-5f32.to_le_bytes())
        .tensor("token_embd.weight", &[32, 4], GgmlType::F32.id(), 0)
        .data(&[0; 512]);
    let config = gguf_model_config(&open(b.build()).unwrap()).unwrap();
    assert_eq!(config.max_position, u32::MAX as usize);
    assert!(matches!(config.validate(), Err(LoadError::TooLarge { what, .. }) if what.contains("RoPE")));
}
