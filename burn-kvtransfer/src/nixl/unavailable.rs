//! The NIXL types of a build without the `nixl` feature: the same API, whose `start` says how to
//! get the real one (so the command-line tools need no feature of their own).

use std::convert::Infallible;
use std::sync::Arc;

use burn_kvcompress::cache::HostAllocator;

use super::NixlConfig;
use crate::error::TransferError;
use crate::protocol::reads::{PeerReads, ReadableMemory, RemoteReads};
use crate::protocol::PrefillServer;

fn not_built() -> TransferError {
    TransferError::NixlUnavailable("burn-kvtransfer was built without its `nixl` feature".into())
}

/// The prefill side of NIXL (not built: [`start`](Self::start) fails).
#[derive(Debug)]
pub struct NixlPrefill(Infallible);

impl NixlPrefill {
    /// Fails: this build has no NIXL.
    pub fn start(_config: &NixlConfig) -> Result<Self, TransferError> {
        Err(not_built())
    }

    /// Unreachable: there is no value of this type.
    pub fn memory(&self) -> ReadableMemory {
        match self.0 {}
    }

    /// Unreachable: there is no value of this type.
    pub fn free_completed(&self, _server: &PrefillServer) {
        match self.0 {}
    }
}

/// The decode side of NIXL (not built: [`start`](Self::start) fails).
#[derive(Debug)]
pub struct NixlDecode(Infallible);

impl NixlDecode {
    /// Fails: this build has no NIXL.
    pub fn start(_config: &NixlConfig, _backing: Option<Arc<dyn HostAllocator>>) -> Result<Self, TransferError> {
        Err(not_built())
    }

    /// Unreachable: there is no value of this type.
    pub fn bytes_read(&self) -> u64 {
        match self.0 {}
    }
}

impl RemoteReads for NixlDecode {
    fn allocator(&self) -> Arc<dyn HostAllocator> {
        match self.0 {}
    }

    fn connect(&self, _metadata: &[u8]) -> Result<Arc<dyn PeerReads>, TransferError> {
        match self.0 {}
    }
}
