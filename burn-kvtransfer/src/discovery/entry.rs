//! What a server's key holds: where to connect, what it serves, and its load.

use serde::{Deserialize, Serialize};

use crate::SchemeDescriptor;

/// One prefill server in the registry (the value of its key, in JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerEntry {
    /// Where decode workers connect: `host:port`.
    pub address: String,
    /// The scheme it serves (`KvScheme::name()`, the descriptor's scheme).
    pub scheme: String,
    /// The fingerprint of its model, 64 hex digits.
    pub model: String,
    /// The emulated rate of its link, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests it holds: submitted, not yet completed, failed or expired.
    pub load: usize,
}

impl ServerEntry {
    /// A server at `address` of caches described by `descriptor`, idle.
    pub fn new(address: String, descriptor: &SchemeDescriptor, link_gbps: Option<f64>) -> Self {
        Self { address, scheme: descriptor.scheme.clone(), model: descriptor.model.to_hex(), link_gbps, load: 0 }
    }

    /// Whether it serves caches a worker of `descriptor` can import (the check its Hello
    /// would make).
    pub fn serves(&self, descriptor: &SchemeDescriptor) -> bool {
        self.scheme == descriptor.scheme && self.model == descriptor.model.to_hex()
    }

    /// The value of its key.
    pub(super) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a server entry serializes")
    }

    /// An entry from the value of a key; the parser's complaint if it is not one.
    pub(super) fn parse(value: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(value).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelFingerprint;

    fn descriptor(scheme: &str, model: &[u8]) -> SchemeDescriptor {
        SchemeDescriptor { scheme: scheme.into(), model: ModelFingerprint::of_bytes(model) }
    }

    #[test]
    fn an_entry_round_trips_and_serves_its_own_descriptor_only() {
        let mut entry = ServerEntry::new("10.0.0.7:7070".into(), &descriptor("dense", b"m"), Some(25.0));
        entry.load = 3;
        assert_eq!(ServerEntry::parse(entry.to_json().as_bytes()), Ok(entry.clone()));
        assert!(entry.serves(&descriptor("dense", b"m")));
        assert!(!entry.serves(&descriptor("dense", b"other model")));
        assert!(!entry.serves(&descriptor("hack:bits=2,pi=64,round=nearest", b"m")));
    }

    #[test]
    fn values_that_are_not_entries_are_refused_with_the_reason() {
        for value in [&b"not json"[..], b"{}", b"{\"address\":7}", b"", &[0xff, 0xfe]] {
            assert!(ServerEntry::parse(value).is_err(), "{value:?}");
        }
        let reason = ServerEntry::parse(b"{\"address\":\"a:1\"}").unwrap_err();
        assert!(reason.contains("missing field `scheme`"), "{reason}");
    }
}
