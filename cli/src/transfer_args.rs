//! `--transport tcp|nixl` and NIXL's settings, for the programs that move KV caches between a
//! prefill and a decode side (`disagg`, `disagg_bench`).

use burn_kvtransfer::nixl::{parse_backend_param, NixlConfig};
use clap::{Args, ValueEnum};

/// How layers move between the prefill and the decode side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// Block frames over TCP, pulled (or pushed, `--mode push`).
    Tcp,
    /// NVIDIA NIXL: the decode side reads each layer from the prefill side's registered memory
    /// over UCX (the transports `UCX_TLS` allows: TCP, shared memory, RDMA); the protocol's
    /// frames still go over TCP. Needs a build with `--features burn-kvtransfer/nixl` and the
    /// NIXL libraries (`cargo xtask nixl-libs` prints the `LD_LIBRARY_PATH` and
    /// `NIXL_PLUGIN_DIR` to set).
    Nixl,
}

/// The transport and, for NIXL, its settings.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct TransferArgs {
    /// How layers move between the prefill and the decode side.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    pub transport: Transport,
    /// With `--transport nixl`: host memory each side registers with NIXL, MiB (on the prefill
    /// side the layers held for decode sides, those that do not fit being pulled over TCP; on
    /// the decode side the receive buffers).
    #[arg(long, default_value_t = 1024)]
    pub nixl_memory_mib: usize,
    /// With `--transport nixl`: a UCX backend parameter `KEY=VALUE` over the plugin's defaults
    /// (repeat for several). UCX's shared-memory transports (`UCX_TLS=shm`) need
    /// `ucx_error_handling_mode=none`.
    #[arg(long = "nixl-param", value_name = "KEY=VALUE", value_parser = parse_backend_param)]
    pub nixl_params: Vec<(String, String)>,
}

impl TransferArgs {
    /// NIXL's settings, with `--transport nixl`.
    pub fn nixl(&self) -> Option<NixlConfig> {
        (self.transport == Transport::Nixl).then(|| NixlConfig {
            backend_params: self.nixl_params.clone(),
            memory_bytes: self.nixl_memory_mib << 20,
            ..NixlConfig::default()
        })
    }

    /// The same flags, for a process this one spawns.
    pub fn to_args(&self) -> Vec<String> {
        let transport = self.transport.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
        let mut args =
            vec!["--transport".into(), transport, "--nixl-memory-mib".into(), self.nixl_memory_mib.to_string()];
        for (key, value) in &self.nixl_params {
            args.extend(["--nixl-param".into(), format!("{key}={value}")]);
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        transfer: TransferArgs,
    }

    #[test]
    fn flags_round_trip_through_the_arguments_of_a_spawned_process() {
        let args =
            ["x", "--transport", "nixl", "--nixl-param", "ucx_error_handling_mode=none", "--nixl-memory-mib", "64"];
        let parsed = Cli::parse_from(args).transfer;
        assert_eq!(parsed.nixl().unwrap().memory_bytes, 64 << 20);
        assert_eq!(parsed.nixl_params, [("ucx_error_handling_mode".to_string(), "none".to_string())]);
        let again = Cli::parse_from(std::iter::once("x".to_string()).chain(parsed.to_args())).transfer;
        assert_eq!(again, parsed);
        assert_eq!(Cli::parse_from(["x"]).transfer.nixl(), None);
        assert!(Cli::try_parse_from(["x", "--nixl-param", "novalue"]).is_err());
    }
}
