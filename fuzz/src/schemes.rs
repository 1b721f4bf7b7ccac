//! The schemes whose received states the `layer_state` target imports: one of each kind, on
//! one small geometry, built once.

use std::sync::{Arc, OnceLock};

use burn_hack_attn::{HackConfig, HackScheme, Rounding};
use burn_kvcompress::{cache::CacheGeometry, fingerprint::ModelFingerprint};
use burn_kvschemes::compose::{ReducedCodebooks, ReducedPqConfig, ZackHackScheme, ZackPqScheme};
use burn_million_pq::{
    cache::PqScheme,
    codebook::{CodebookGeometry, Codebooks},
    CodebookScope, PqConfig,
};
use burn_zack::{
    cache::ZackScheme,
    rotation::{HeadRotation, RotationConfig, RotationGeometry, Rotations},
    RankRule, Ranks,
};

/// Channels per head: a power of two (HACK's Hadamard rotation), split by every scheme's groups.
pub(crate) const HEAD_DIM: usize = 64;
/// KV heads (two query heads each).
pub(crate) const KV_HEADS: usize = 2;
/// Slots PQ and ZACK × PQ keep in float.
const PQ_WINDOW: usize = 4;

/// The geometry of a batch of `batch` sequences.
pub(crate) fn geometry(batch: usize) -> CacheGeometry {
    CacheGeometry { batch, kv_heads: KV_HEADS, heads: 2 * KV_HEADS, head_dim: HEAD_DIM }
}

/// One scheme of each kind whose state a transfer carries.
pub(crate) struct Schemes {
    /// HACK on the paper's axes, 2 bits, Π = 32.
    pub hack_paper: HackScheme,
    /// The `hack2` preset: the channel axes, sinks, a float window.
    pub hack_channel: HackScheme,
    /// MILLION with codebooks of 8 subspaces of 2 bits.
    pub pq: PqScheme,
    /// ZACK at half the coordinates.
    pub zack: ZackScheme,
    /// ZACK × HACK (paper axes, 2 bits).
    pub zack_hack: ZackHackScheme,
    /// ZACK × PQ (2-bit subspaces of 4 channels).
    pub zack_pq: ZackPqScheme,
}

/// The schemes, built on first use.
pub(crate) fn schemes() -> &'static Schemes {
    static SCHEMES: OnceLock<Schemes> = OnceLock::new();
    SCHEMES.get_or_init(build)
}

fn build() -> Schemes {
    let paper = HackConfig::new(2, 32, Rounding::Nearest).expect("a valid HACK configuration");
    let hack_channel = HackConfig::preset("hack2").expect("the hack2 preset");
    let zack_hack_rank = ZackHackScheme::rank_multiple(HEAD_DIM, &paper);
    let zack_pq = zack(4);
    let reduced = ReducedPqConfig { sub_dim: 4, nbits: 2 };
    Schemes {
        hack_paper: HackScheme::new(paper.clone()).expect("a valid HACK scheme"),
        hack_channel: HackScheme::new(hack_channel).expect("the hack2 scheme"),
        pq: PqScheme::new(Arc::new(codebooks()), PQ_WINDOW),
        zack: zack(16),
        zack_hack: ZackHackScheme::new(zack(zack_hack_rank), paper).expect("ranks in HACK's multiples"),
        zack_pq: ZackPqScheme::new(zack_pq.clone(), Arc::new(reduced_codebooks(&zack_pq, reduced)), PQ_WINDOW)
            .expect("codebooks of the scheme's widths"),
    }
}

/// Deterministic finite values for codebooks.
fn filler(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919) % 97) as f32 / 48.0 - 1.0).collect()
}

/// MILLION codebooks for the geometry: 8 subspaces of 2 bits per KV head.
pub(crate) fn codebooks() -> Codebooks {
    let config = PqConfig { subspaces: 8, nbits: 2, scope: CodebookScope::LayerHead };
    let geometry = CodebookGeometry { layers: 1, kv_heads: KV_HEADS, head_dim: HEAD_DIM };
    let mut books = Codebooks {
        config,
        geometry,
        model: ModelFingerprint::of_bytes(b"fuzz"),
        calibration: "fuzz".into(),
        keys: Vec::new(),
        values: Vec::new(),
    };
    let len = books.shape().iter().product();
    (books.keys, books.values) = (vec![filler(len)], vec![filler(len)]);
    books
}

/// Identity rotations of one layer of [`KV_HEADS`] heads of `head_dim` channels, with
/// decreasing singular values.
pub(crate) fn identity_rotations(head_dim: usize) -> Rotations {
    let head = HeadRotation {
        basis: (0..head_dim * head_dim).map(|i| f32::from(u8::from(i / head_dim == i % head_dim))).collect(),
        singular_values: (0..head_dim).map(|i| (head_dim - i) as f32).collect(),
        mean: vec![0.0; head_dim],
    };
    Rotations {
        geometry: RotationGeometry { layers: 1, heads: 2 * KV_HEADS, kv_heads: KV_HEADS, head_dim },
        model: ModelFingerprint::of_bytes(b"fuzz"),
        config: RotationConfig::default(),
        calibration: "identity".into(),
        query_key: vec![vec![head.clone(); KV_HEADS]],
        value_output: vec![vec![head; KV_HEADS]],
    }
}

/// ZACK on identity rotations, ranks at half the coordinates in multiples of `multiple`.
fn zack(multiple: usize) -> ZackScheme {
    let rotations = identity_rotations(HEAD_DIM);
    let rule = RankRule { min_rank: multiple, multiple };
    let (ranks, _) = Ranks::for_compression_rate(&rotations, 0.5, rule).expect("ranks at rate 0.5");
    ZackScheme::new(Arc::new(rotations), ranks).expect("a valid ZACK scheme")
}

fn reduced_codebooks(zack: &ZackScheme, config: ReducedPqConfig) -> ReducedCodebooks {
    let layout = zack.layout(0);
    let book = |width: usize| filler(width * config.centroids());
    ReducedCodebooks {
        config,
        model: ModelFingerprint::of_bytes(b"fuzz"),
        rotations: zack.rotations().digest(),
        ranks: zack.ranks().digest(),
        calibration: "fuzz".into(),
        keys: vec![book(layout.key_width())],
        values: vec![book(layout.value_width())],
    }
}
