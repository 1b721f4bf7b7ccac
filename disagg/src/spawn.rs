//! The prefill server processes `demo` and `sweep` spawn on loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

use anyhow::{bail, Context};

use crate::{serve::LISTENING, ModelSource, Pairs, SpawnArgs, TransferArgs};

/// A spawned prefill server process, killed when dropped.
pub struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        _ = self.0.kill();
        _ = self.0.wait();
    }
}

/// A spawned server process still loading its model.
pub struct Starting {
    child: Spawned,
    stdout: BufReader<ChildStdout>,
}

/// Spawns one server process that serves every pair of `pairs` over `transfer` and returns at
/// once (the process loads its model while this one goes on; [`Starting::listening`] waits for
/// it).
pub fn spawn_server(
    source: &ModelSource,
    pairs: &Pairs,
    spawn: &SpawnArgs,
    transfer: &TransferArgs,
) -> anyhow::Result<Starting> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--block-kib", &spawn.block_kib.to_string()]);
    cmd.args(transfer.to_args());
    for kv in &pairs.schemes {
        cmd.args(["--kv", kv]);
    }
    if !pairs.links.is_empty() {
        let links: Vec<String> = pairs.links.iter().map(f64::to_string).collect();
        cmd.args(["--link-gbps", &links.join(",")]);
    }
    cmd.args(["--backend", &format!("{:?}", source.backend).to_lowercase(), "--weights", &source.weights.name()]);
    if let Some(model) = &source.model {
        cmd.arg("--model").arg(model);
    }
    if source.plain_ops {
        cmd.arg("--plain-ops");
    }
    if let Some(shape) = source.random_model {
        cmd.args(["--random-model", &shape.name(), "--weights-seed", &source.weights_seed.to_string()]);
    }
    if let Some(gpu) = &spawn.server_gpu {
        cmd.env("CUDA_VISIBLE_DEVICES", gpu);
    }
    let mut child = Spawned(cmd.stdout(Stdio::piped()).spawn()?);
    let stdout = BufReader::new(child.0.stdout.take().context("child stdout")?);
    Ok(Starting { child, stdout })
}

impl Starting {
    /// Waits until the server listens on each of its `pairs` addresses; returns it and the
    /// addresses, schemes outermost (the order `serve` listens in).
    pub fn listening(mut self, pairs: usize) -> anyhow::Result<(Spawned, Vec<String>)> {
        let mut addresses = Vec::new();
        for _ in 0..pairs {
            let mut line = String::new();
            self.stdout.read_line(&mut line)?;
            match line.trim().strip_prefix(LISTENING).and_then(|rest| rest.split_whitespace().next()) {
                Some(addr) => addresses.push(addr.to_string()),
                None => bail!("the prefill server did not start (said {line:?})"),
            }
        }
        Ok((self.child, addresses))
    }
}
