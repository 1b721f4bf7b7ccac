//! `--etcd`: the prefill servers' registry (`burn_kvtransfer::discovery`) instead of a fixed
//! list. `serve` registers each of its pairs with its load; `decode` pulls from the registered
//! servers of its pair, the least loaded first, following them as they come and go.
//!
//! The registry needs the `etcd` feature (gRPC, and `protoc` to build it): without it the flags
//! are still accepted, and using them is an error that says so.

use clap::Args;

/// Where the registry is.
#[derive(Args, Debug, Clone)]
pub struct RegistryArgs {
    /// etcd endpoints of the prefill servers' registry (`host:port`, comma-separated): `serve`
    /// registers its servers there, `decode` pulls from the servers registered there instead of
    /// `--server`. Needs a disagg built with the `etcd` feature.
    #[arg(long, value_delimiter = ',', value_name = "ENDPOINTS")]
    pub etcd: Vec<String>,
    /// Prefix of the registry's keys: each server is `PREFIX/servers/ID`.
    #[arg(long, default_value = "/burn-kvtransfer", value_name = "PREFIX", requires = "etcd")]
    pub etcd_prefix: String,
}

impl RegistryArgs {
    /// Whether a registry was given.
    pub fn given(&self) -> bool {
        !self.etcd.is_empty()
    }
}

#[cfg(feature = "etcd")]
pub use enabled::{register, watch, Watched};

#[cfg(not(feature = "etcd"))]
pub use disabled::{register, watch, Watched};

/// The host and port of `address`, the host without IPv6 brackets.
fn split_host(address: &str) -> Option<(&str, &str)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host.trim_start_matches('[').trim_end_matches(']'), port))
}

/// The address decode workers are told for a server listening on `local` (`--listen`'s
/// `host:port` with the port bound): `advertise`'s host, or the listening host unless that is
/// unspecified (0.0.0.0 or ::), which reaches no one.
pub fn advertised(local: &str, advertise: Option<&str>) -> anyhow::Result<String> {
    let (host, port) = split_host(local).ok_or_else(|| anyhow::anyhow!("`{local}` is not host:port"))?;
    let host = match advertise {
        Some(host) => host,
        None if host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_unspecified()) => {
            anyhow::bail!("the server listens on {local}, which decode workers cannot reach: give --etcd-advertise")
        }
        None => host,
    };
    Ok(match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    })
}

#[cfg(feature = "etcd")]
mod enabled {
    use std::sync::Arc;
    use std::time::Duration;

    use anyhow::Context;
    use burn_kvtransfer::discovery::{self, RegistryConfig, RegistryWatcher, ServerEntry, Tell};
    use burn_kvtransfer::protocol::{ClientConfig, PrefillPool};

    use super::RegistryArgs;
    use crate::stats::PairServer;

    /// The registry's servers of one pair, connected.
    pub struct Watched(RegistryWatcher);

    impl Watched {
        /// Their connections.
        pub fn pool(&self) -> &PrefillPool {
            self.0.pool()
        }
    }

    /// What the registry's tasks say goes to stderr.
    fn tell() -> Tell {
        Arc::new(|event| eprintln!("[registry: {event}]"))
    }

    fn config(args: &RegistryArgs) -> RegistryConfig {
        RegistryConfig { prefix: args.etcd_prefix.clone(), ..RegistryConfig::new(args.etcd.clone()) }
    }

    /// Registers `pairs` (each with the address workers are told) under one lease of
    /// `lease_secs`, reporting their loads.
    pub async fn register(
        args: &RegistryArgs,
        lease_secs: f64,
        pairs: &[(String, PairServer)],
    ) -> anyhow::Result<discovery::Registration> {
        let config = RegistryConfig { lease_ttl: Duration::from_secs_f64(lease_secs), ..config(args) };
        let servers = pairs
            .iter()
            .map(|(address, pair)| discovery::Registered {
                entry: ServerEntry::new(address.clone(), pair.server.descriptor(), pair.link_gbps),
                load: pair.server.load(),
            })
            .collect();
        let registration = discovery::Registration::start(&config, servers, tell())
            .await
            .with_context(|| format!("registering in etcd under {}", config.prefix))?;
        for ((address, _), key) in pairs.iter().zip(registration.keys()) {
            eprintln!("[registry: {address} registered as {key}]");
        }
        Ok(registration)
    }

    /// Connects to the servers registered for `connect`'s scheme and model at `link_gbps`, and
    /// follows the registry; fails if none is there.
    pub async fn watch(args: &RegistryArgs, connect: ClientConfig, link_gbps: Option<f64>) -> anyhow::Result<Watched> {
        let config = config(args);
        let descriptor = connect.descriptor.clone();
        let wanted = {
            let descriptor = descriptor.clone();
            move |entry: &ServerEntry| entry.serves(&descriptor) && entry.link_gbps == link_gbps
        };
        let watcher = RegistryWatcher::start(&config, connect, wanted, tell())
            .await
            .with_context(|| format!("reading the prefill servers' registry under {}", config.prefix))?;
        if watcher.pool().is_empty() {
            let link = link_gbps.map_or("an unpaced link".into(), |g| format!("{g} Gbit/s"));
            anyhow::bail!(
                "no prefill server of {descriptor} at {link} could be reached through the registry at {} under {}",
                config.endpoints.join(","),
                config.prefix
            );
        }
        Ok(Watched(watcher))
    }
}

#[cfg(not(feature = "etcd"))]
mod disabled {
    use burn_kvtransfer::protocol::{ClientConfig, PrefillPool};

    use super::RegistryArgs;
    use crate::stats::PairServer;

    const NOT_BUILT: &str = "--etcd needs a disagg built with the `etcd` feature (cargo build --features disagg/etcd)";

    /// Never made: there is no registry without the feature.
    pub enum Registration {}

    impl Registration {
        /// Unreachable.
        pub async fn revoke(self) -> Result<(), std::convert::Infallible> {
            match self {}
        }
    }

    /// Never made: there is no registry without the feature.
    pub enum Watched {}

    impl Watched {
        /// Unreachable.
        pub fn pool(&self) -> &PrefillPool {
            match *self {}
        }
    }

    /// Fails: built without the registry.
    pub async fn register(args: &RegistryArgs, _: f64, _: &[(String, PairServer)]) -> anyhow::Result<Registration> {
        Err(not_built(args))
    }

    /// Fails: built without the registry.
    pub async fn watch(args: &RegistryArgs, _: ClientConfig, _: Option<f64>) -> anyhow::Result<Watched> {
        Err(not_built(args))
    }

    /// The error of asking for the registry of `args`.
    fn not_built(args: &RegistryArgs) -> anyhow::Error {
        anyhow::anyhow!("{NOT_BUILT}: cannot use the registry under {} at {}", args.etcd_prefix, args.etcd.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::advertised;

    #[test]
    fn workers_are_told_a_reachable_address() {
        assert_eq!(advertised("127.0.0.1:7070", None).unwrap(), "127.0.0.1:7070");
        assert_eq!(advertised("0.0.0.0:7071", Some("10.0.0.5")).unwrap(), "10.0.0.5:7071");
        assert_eq!(advertised("[::]:7072", Some("fe80::1")).unwrap(), "[fe80::1]:7072");
        assert!(advertised("0.0.0.0:7070", None).unwrap_err().to_string().contains("--etcd-advertise"));
        assert!(advertised("[::]:7070", None).is_err());
        assert!(advertised("nonsense", None).is_err());
    }
}
