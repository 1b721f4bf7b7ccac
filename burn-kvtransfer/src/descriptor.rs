//! The scheme descriptor both sides compare at connect time: the KV scheme's full configuration
//! string (`KvScheme::name()`, e.g. `dense` or `hack:bits=2,pi=64,round=nearest`) and a
//! fingerprint of the model file. Caches move only between processes whose descriptors are equal.

use std::fmt;

pub use burn_kvcompress::fingerprint::ModelFingerprint;

/// What a cache is: the scheme configuration that produced it and the model it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemeDescriptor {
    /// The scheme's `KvScheme::name()`, which spells out its whole configuration.
    pub scheme: String,
    /// The model's fingerprint.
    pub model: ModelFingerprint,
}

impl fmt::Display for SchemeDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scheme `{}` on model {}", self.scheme, self.model)
    }
}
