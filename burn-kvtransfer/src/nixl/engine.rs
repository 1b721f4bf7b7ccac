//! An agent with its backend, created only once the NIXL library is known to load (the stub
//! API aborts the process on the first call into a library it could not load), and the text of
//! the completion notification both sides agree on.

use std::sync::atomic::{AtomicU64, Ordering};

use nixl_sys::{Agent, NixlError};

use super::NixlConfig;
use crate::error::TransferError;

/// Agents this process created (makes their names unique: a decode side tells its peers apart
/// by name).
static AGENTS: AtomicU64 = AtomicU64::new(0);

/// An environment variable's value for messages.
fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| "(unset)".into())
}

/// A failed NIXL call as a transfer error.
pub(super) fn failed(what: &str, e: NixlError) -> TransferError {
    TransferError::Nixl(format!("{what}: {e}"))
}

/// Creates an agent named after `role` with `config`'s backend.
pub(super) fn start_agent(config: &NixlConfig, role: &str) -> Result<Agent, TransferError> {
    let unavailable = TransferError::NixlUnavailable;
    // The stub API loads `libnixl_capi.so` on first use; `is_stub` says whether that failed
    // (without aborting, which any other call would do).
    if nixl_sys::is_stub() {
        return Err(unavailable(format!(
            "libnixl_capi.so could not be loaded (LD_LIBRARY_PATH={}); `cargo xtask nixl-libs` installs NIXL from \
             the nixl-cu12 wheel and prints the LD_LIBRARY_PATH and NIXL_PLUGIN_DIR to set",
            env("LD_LIBRARY_PATH")
        )));
    }
    let name = format!("burn-kvtransfer-{role}-{}-{}", std::process::id(), AGENTS.fetch_add(1, Ordering::Relaxed));
    let agent = Agent::new(&name).map_err(|e| unavailable(format!("creating agent {name}: {e}")))?;
    let backend = &config.backend;
    let (_, mut params) = agent.get_plugin_params(backend).map_err(|e| {
        unavailable(format!("no {backend} backend plugin ({e}; NIXL_PLUGIN_DIR={})", env("NIXL_PLUGIN_DIR")))
    })?;
    for (key, value) in &config.backend_params {
        params.set(key, value).map_err(|e| unavailable(format!("backend parameter {key}={value}: {e}")))?;
    }
    agent.create_backend(backend, &params).map_err(|e| {
        unavailable(format!(
            "creating the {backend} backend failed ({e}; UCX_TLS={}, UCX_NET_DEVICES={}; shared-memory transports \
             need the backend parameter ucx_error_handling_mode=none)",
            env("UCX_TLS"),
            env("UCX_NET_DEVICES")
        ))
    })?;
    Ok(agent)
}

/// The notification that completes `request` (text: NIXL's bindings hand notifications over as
/// strings).
pub(super) fn completion(request: u64) -> String {
    format!("complete {request}")
}

/// The request a notification completes, if it is a completion.
pub(super) fn completed_request(notification: &str) -> Option<u64> {
    notification.strip_prefix("complete ")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_round_trip_and_other_notifications_are_not_completions() {
        assert_eq!(completed_request(&completion(u64::MAX)), Some(u64::MAX));
        assert_eq!(completed_request(&completion(7)), Some(7));
        assert_eq!(completed_request("complete"), None);
        assert_eq!(completed_request("complete -1"), None);
        assert_eq!(completed_request("hello 7"), None);
    }
}
