//! A layer's state as a transfer receives it, imported into each scheme's cache on the CPU: the
//! transfer's decoder (`burn_kvtransfer::state_codec`), then the scheme's own checks of names,
//! dtypes, shapes and token counts against its geometry.

use burn::tensor::Tensor;
use burn_kvcompress::{
    backend::NdArray,
    cache::{
        AttendOptions, Bytes, CacheGeometry, DenseScheme, HalfDenseScheme, KvCache, KvScheme, LayerState,
        TransferableCache, TransferableScheme,
    },
};
use burn_kvtransfer::state_codec::decode_state;

use crate::schemes::{geometry, schemes};

/// The schemes, in the order of the input's first byte (its low three bits); its bit 3 makes
/// the batch two sequences instead of one.
pub const SCHEMES: [&str; 8] =
    ["dense", "dense-f16", "hack-paper", "hack-channel", "pq", "zack", "zack-hack", "zack-pq"];

/// The selector byte for scheme `index` of [`SCHEMES`] and a batch of `batch` (1 or 2).
pub fn selector(index: usize, batch: usize) -> u8 {
    index as u8 | if batch == 2 { 8 } else { 0 }
}

/// Decodes the bytes after the first as a state and imports it into the scheme the first byte
/// names: an accepted state must make a cache of its token count, which attends to a query
/// without panicking and exports a state that imports again and exports the same. Accepted: the
/// state imported.
pub fn layer_state(data: &[u8]) -> bool {
    let Some((&selector, bytes)) = data.split_first() else {
        return false;
    };
    let Ok(state) = decode_state(Bytes::copy_from_slice(bytes)) else {
        return false;
    };
    let geometry = geometry(if selector & 8 != 0 { 2 } else { 1 });
    let s = schemes();
    match selector & 7 {
        0 => import(&DenseScheme, geometry, &state),
        1 => import(&HalfDenseScheme, geometry, &state),
        2 => import(&s.hack_paper, geometry, &state),
        3 => import(&s.hack_channel, geometry, &state),
        4 => import(&s.pq, geometry, &state),
        5 => import(&s.zack, geometry, &state),
        6 => import(&s.zack_hack, geometry, &state),
        _ => import(&s.zack_pq, geometry, &state),
    }
}

/// Imports `state` into `scheme`'s cache for layer 0. A state it accepts must make a cache of
/// its token count, which attends to a query without panicking and exports a state that imports
/// again and exports the same. Whether it was accepted.
pub(crate) fn import<S>(scheme: &S, geometry: CacheGeometry, state: &LayerState) -> bool
where
    S: TransferableScheme<NdArray>,
    S::Cache: TransferableCache<NdArray>,
{
    let device = Default::default();
    let Ok(cache) = scheme.import_state(0, geometry, state, &device) else {
        return false;
    };
    let name = KvScheme::<NdArray>::name(scheme);
    assert_eq!(cache.len(), state.tokens, "{name}");
    if cache.len() > 0 {
        let query = Tensor::<NdArray, 4>::zeros([geometry.batch, geometry.heads, 1, geometry.head_dim], &device);
        let options = AttendOptions { scale: 0.125, key_start: vec![0; geometry.batch], window: None };
        let _ = cache.attend(query, &options);
    }
    let exported = cache.export_state();
    assert_eq!(exported.tokens, state.tokens, "{name}");
    let again = scheme.import_state(0, geometry, &exported, &device).expect("an exported state imports");
    assert_eq!(again.export_state(), exported, "{name}");
    true
}
