//! `disagg serve`: one process, one model load, a prefill server for every (scheme, link rate)
//! pair, each on its own port.

use std::cell::Cell;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;

use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{LayerState, TransferableCache, TransferableScheme},
    model::CausalLm,
};
use burn_kvschemes::with_scheme;
use burn_kvtransfer::{
    engine::{ModelPrefill, PrefillEngine},
    nixl::NixlPrefill,
    protocol::{PrefillServer, ServerConfig},
    transport::tcp::TcpServer,
    wire::ModelShape,
    ModelFingerprint, SchemeDescriptor,
};
use kvcompress_cli::backend_choice::KernelBackend;

use crate::registry::{advertised, register};
use crate::shutdown::{drain, stop_signal};
use crate::stats::{report_expiries, serve_stats, PairServer, STATS_ON};
use crate::{runtime, BaseModel, ServeArgs};

/// The line a server prints per pair once it listens: `listening on ADDR kv=KV link=RATE`.
pub const LISTENING: &str = "listening on ";

/// The address `--listen` gives pair `index`: its port plus the index, or a free port for port 0.
fn pair_address(listen: &str, index: usize) -> anyhow::Result<String> {
    let (host, port) =
        listen.rsplit_once(':').ok_or_else(|| anyhow::anyhow!("--listen `{listen}` is not host:port"))?;
    let port: u16 = port.parse().map_err(|_| anyhow::anyhow!("--listen `{listen}`: `{port}` is not a port"))?;
    let port = match port {
        0 => 0,
        p => u16::try_from(p as usize + index).map_err(|_| anyhow::anyhow!("--listen `{listen}`: ports run out"))?,
    };
    Ok(format!("{host}:{port}"))
}

pub fn serve<B: KernelBackend>(device: B::Device, args: &ServeArgs) -> anyhow::Result<()>
where
    CausalLm<B>: Send,
{
    let base = BaseModel::<B>::load(&args.source, &device)?;
    // One NIXL agent and registered memory for every pair.
    let nixl = args.transfer.nixl().map(|config| NixlPrefill::start(&config)).transpose()?;
    let mut servers = Vec::new();
    for kv in &args.pairs.schemes {
        let (model, scheme) = base.prepared(kv)?;
        for link_gbps in args.pairs.links() {
            let config = ServerConfig {
                block_size: args.block_kib * 1024,
                lease: Duration::from_secs_f64(args.lease_secs),
                io_timeout: Duration::from_secs_f64(args.io_timeout_secs),
                link_gbps,
                readable: nixl.as_ref().map(NixlPrefill::memory),
                ..ServerConfig::default()
            };
            let server = with_scheme!(
                scheme.clone(),
                prefill_server::<B, _>,
                (model.clone(), base.fingerprint, device.clone(), config)
            );
            if let Some(nixl) = &nixl {
                nixl.free_completed(&server);
            }
            servers.push((server, kv.clone(), link_gbps));
        }
    }
    runtime()?.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        let mut listening = Vec::new();
        for (index, (server, kv, link_gbps)) in servers.into_iter().enumerate() {
            let listener = TcpServer::bind(&pair_address(&args.listen, index)?).await?;
            listening.push((listener.local_addr()?.to_string(), PairServer { kv, link_gbps, server: server.clone() }));
            tasks.spawn(async move { server.serve(listener).await });
        }
        // Registered before it says it listens: a server that prints its addresses is in the
        // registry, and one that cannot register exits without a word on stdout.
        let registration = match args.registry.given() {
            true => {
                let advertise = args.etcd_advertise.as_deref();
                let addresses = listening.iter().map(|(local, _)| advertised(local, advertise));
                let pairs = addresses.zip(&listening).map(|(a, (_, pair))| Ok((a?, pair.clone())));
                let pairs = pairs.collect::<anyhow::Result<Vec<_>>>()?;
                Some(register(&args.registry, args.etcd_lease_secs, &pairs).await?)
            }
            false => None,
        };
        let mut pairs = Vec::new();
        for (local, pair) in listening {
            let link = pair.link_gbps.map_or("unpaced".into(), |g| g.to_string());
            println!("{LISTENING}{local} kv={} link={link}", pair.kv);
            pairs.push(pair);
        }
        if let Some(addr) = &args.stats_listen {
            let listener =
                tokio::net::TcpListener::bind(addr).await.with_context(|| format!("--stats-listen {addr}"))?;
            println!("{STATS_ON}{}", listener.local_addr()?);
            tasks.spawn(serve_stats(listener, pairs.clone()));
        }
        std::io::stdout().flush()?;
        let reporting = tokio::spawn(report_expiries(pairs.clone(), Duration::from_millis(100)));
        let served = async {
            while let Some(done) = tasks.join_next().await {
                done??;
            }
            anyhow::Ok(())
        };
        tokio::select! {
            served = served => served?,
            signal = stop_signal() => {
                let signal = signal?;
                if let Some(registration) = registration {
                    match registration.revoke().await {
                        Ok(()) => eprintln!("[serve: {signal}: left the registry]"),
                        Err(e) => eprintln!("[serve: {signal}: could not leave the registry ({e}); its lease will lapse]"),
                    }
                }
                let held = drain(&pairs, Duration::from_secs_f64(args.drain_secs)).await;
                eprintln!("[serve: {signal}: exiting, {held} requests still held]");
            }
        }
        reporting.abort();
        anyhow::Ok(())
    })
}

/// A prefill engine that says on stderr how long each prefill took and when its first and last
/// layer were published (the server-side part of a request's time).
struct TimedPrefill<E> {
    inner: E,
    label: String,
}

impl<E: PrefillEngine> PrefillEngine for TimedPrefill<E> {
    fn descriptor(&self) -> SchemeDescriptor {
        self.inner.descriptor()
    }

    fn shape(&self) -> ModelShape {
        self.inner.shape()
    }

    fn prefill(&mut self, tokens: &[u32], publish: &dyn Fn(usize, LayerState)) -> Result<Vec<f32>, String> {
        let started = Instant::now();
        let (first, last) = (Cell::new(None), Cell::new(None));
        let logits = self.inner.prefill(tokens, &|layer, state| {
            let now = started.elapsed();
            first.set(first.get().or(Some(now)));
            last.set(Some(now));
            publish(layer, state);
        });
        let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        eprintln!(
            "[prefill {}: {} tokens in {:.1} ms; layers published from {:.1} to {:.1} ms]",
            self.label,
            tokens.len(),
            started.elapsed().as_secs_f64() * 1e3,
            ms(first.get()),
            ms(last.get())
        );
        logits
    }
}

/// A prefill server of `model` under `scheme` (its engine thread starts here).
fn prefill_server<B: Backend, S>(
    scheme: S,
    model: CausalLm<B>,
    fingerprint: ModelFingerprint,
    device: B::Device,
    config: ServerConfig,
) -> PrefillServer
where
    CausalLm<B>: Send,
    S: TransferableScheme<B> + Send + 'static,
    S::Cache: TransferableCache<B>,
{
    let link = config.link_gbps.map_or("unpaced".into(), |g| format!("{g} Gbit/s"));
    let label = format!("{} at {link}", scheme.name());
    PrefillServer::new(TimedPrefill { inner: ModelPrefill::new(model, scheme, fingerprint, device), label }, config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_listen_on_consecutive_ports_or_free_ones() {
        assert_eq!(pair_address("127.0.0.1:7070", 0).unwrap(), "127.0.0.1:7070");
        assert_eq!(pair_address("127.0.0.1:7070", 3).unwrap(), "127.0.0.1:7073");
        assert_eq!(pair_address("0.0.0.0:0", 5).unwrap(), "0.0.0.0:0");
        assert!(pair_address("localhost", 0).is_err());
        assert!(pair_address("h:65535", 1).unwrap_err().to_string().contains("ports run out"));
    }
}
