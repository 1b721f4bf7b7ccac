//! The publishing wrapper of the prefill engine is transparent to the model: it hands on the
//! wrapped cache's key rotation (a model that has one rotates keys and queries in its RoPE launch)
//! and publishes after a rotated append as after a plain one.

use std::cell::RefCell;

use burn::tensor::{Distribution, Tensor};
use burn_hack_attn::{HackConfig, HackScheme};
use burn_kvcompress::{
    backend::NdArray,
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, LayerState, TransferableCache},
};
use burn_kvtransfer::{engine::PublishingScheme, state_codec::encode_state};

type B = NdArray;

#[test]
fn a_publishing_cache_forwards_the_rotation_and_publishes_rotated_appends() {
    let device = Default::default();
    let scheme = HackScheme::from(HackConfig::preset("hack2").unwrap());
    let geometry = CacheGeometry { batch: 1, kv_heads: 2, heads: 4, head_dim: 64 };
    let published = RefCell::new(Vec::<(usize, LayerState)>::new());
    let publish = |layer: usize, state: LayerState| published.borrow_mut().push((layer, state));
    let publishing = PublishingScheme { inner: &scheme, publish: &publish };
    let mut wrapped = publishing.new_cache(3, geometry, &device);
    let mut plain = KvScheme::<B>::new_cache(&scheme, 3, geometry, &device);

    let rotation = wrapped.key_rotation().expect("hack2's rotation is handed on");
    let want = plain.key_rotation().expect("hack2 rotates keys");
    assert_eq!(rotation.into_data(), want.into_data());

    let random = |shape: [usize; 4]| Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
    let (k, v) = (random([1, 2, 150, 64]), random([1, 2, 150, 64]));
    wrapped.append_rotated(k.clone(), v.clone()).unwrap();
    plain.append_rotated(k, v).unwrap();
    let published = published.borrow();
    assert_eq!(published.len(), 1, "one state published per append");
    assert_eq!(published[0].0, 3);
    assert_eq!(encode_state(&published[0].1), encode_state(&plain.export_state()));

    let q = random([1, 4, 1, 64]);
    let options = AttendOptions { scale: 0.125, key_start: vec![0], window: None };
    let got = wrapped.attend_rotated(q.clone(), &options).unwrap();
    let want = plain.attend_rotated(q, &options).unwrap();
    assert_eq!(got.into_data(), want.into_data());
}
