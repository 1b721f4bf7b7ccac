//! A `disagg serve` process of the tiny random model on loopback, its stats port queried.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use super::wait::wait_until;

/// How long a process may take to load the tiny model and listen (generous: the CI machine may
/// be busy building).
pub const START_LIMIT: Duration = Duration::from_secs(120);

/// A pair's counters, from the server's stats port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Requests held under leases.
    pub requests: u64,
    /// Bytes of their serialized layers in the store.
    pub held_bytes: u64,
    /// Requests freed by lease expiry so far.
    pub expired: u64,
    /// Bytes of layers still referenced anywhere (the store, queued or half-written frames).
    pub live_bytes: u64,
    /// Bytes written to all connections.
    pub bytes_sent: u64,
    /// The process's peak resident memory so far (its high-water mark).
    pub peak_rss_bytes: u64,
}

impl Stats {
    /// Nothing held, nothing referenced: a server with no request, whatever it served before.
    pub fn is_idle(&self) -> bool {
        self.requests == 0 && self.held_bytes == 0 && self.live_bytes == 0
    }
}

/// A running prefill server process (one pair: dense, unpaced unless `--link-gbps` is given),
/// killed when dropped.
pub struct Server {
    child: Arc<Mutex<Child>>,
    /// The pair's address.
    pub addr: String,
    stats_addr: String,
    stderr: Arc<Mutex<String>>,
}

/// Collects everything `from` says into `into`, on a thread of its own, which ends with `from`.
pub fn collect(mut from: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = from.read(&mut chunk) {
            bytes.extend_from_slice(&chunk[..n]);
            *into.lock().unwrap() = String::from_utf8_lossy(&bytes).into_owned();
        }
    })
}

impl Server {
    /// Starts `disagg serve --random-model tiny` with `args` on free loopback ports and waits
    /// until it listens.
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_disagg"))
            .args(["serve", "--random-model", "tiny", "--listen", "127.0.0.1:0", "--stats-listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("disagg serve starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        collect(child.stderr.take().unwrap(), stderr.clone());
        let (lines, said) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || stdout.lines().map_while(Result::ok).try_for_each(|line| lines.send(line)));
        let child = Arc::new(Mutex::new(child));
        let line = || match said.recv_timeout(START_LIMIT) {
            Ok(line) => line,
            Err(e) => {
                _ = child.lock().unwrap().kill();
                panic!("the prefill server did not start ({e}): {}", stderr.lock().unwrap())
            }
        };
        let first = line();
        let addr = first.strip_prefix("listening on ").and_then(|r| r.split_whitespace().next());
        let addr = addr.unwrap_or_else(|| panic!("not a listening line: {first:?}")).to_string();
        let second = line();
        let stats_addr = second.strip_prefix("stats on ").unwrap_or_else(|| panic!("not a stats line: {second:?}"));
        Self { stats_addr: stats_addr.to_string(), child, addr, stderr }
    }

    /// The pair's counters now.
    pub fn stats(&self) -> Stats {
        let mut stream = TcpStream::connect(&self.stats_addr).expect("the stats port answers");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("a stats line");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        let pair = &value["pairs"][0];
        let field = |name: &str| pair[name].as_u64().unwrap_or_else(|| panic!("no {name} in {text}"));
        Stats {
            requests: field("requests"),
            held_bytes: field("held_bytes"),
            expired: field("expired"),
            live_bytes: field("live_bytes"),
            bytes_sent: field("bytes_sent"),
            peak_rss_bytes: value["peak_rss_bytes"].as_u64().unwrap_or_else(|| panic!("no peak RSS in {text}")),
        }
    }

    /// Waits (at most `limit`) until the server holds and references nothing; returns its stats.
    pub fn wait_idle(&self, limit: Duration) -> Stats {
        wait_until(limit, "the prefill server back to idle", || self.stats(), Stats::is_idle);
        self.stats()
    }

    /// What the server said on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Something that SIGKILLs the server and waits for it to exit, for a proxy to call.
    pub fn killer(&self) -> impl FnOnce() + Send + 'static {
        let child = self.child.clone();
        move || {
            let mut child = child.lock().unwrap();
            child.kill().expect("SIGKILL the prefill server");
            child.wait().expect("the killed prefill server exits");
        }
    }

    /// Sends the server SIGTERM (as an orchestrator stops it) and waits at most `limit` for it
    /// to exit; returns how it ended. (Only the registry's tests stop a server so.)
    #[cfg(feature = "etcd")]
    pub fn terminate(&self, limit: Duration) -> ExitStatus {
        let pid = self.child.lock().unwrap().id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(sent.success(), "kill -TERM {pid} failed");
        wait_until(limit, "the terminated prefill server's exit", || self.exited(), Option::is_some);
        self.exited().unwrap()
    }

    /// How the process ended, if it did.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.child.lock().unwrap().try_wait().unwrap()
    }

    /// Whether the process was ended by SIGKILL.
    pub fn was_killed(&self) -> bool {
        self.exited().and_then(|status| status.signal()) == Some(9)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        _ = child.kill();
        _ = child.wait();
    }
}
