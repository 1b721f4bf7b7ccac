//! A real etcd for the registry's tests: a process of its own on free loopback ports with a
//! fresh data directory, both gone when dropped (the tests need no etcd service, and do not
//! touch one that runs); and `etcdctl`, a client independent of the code under test, to read,
//! write and watch its keys.
//!
//! Without the binaries (Debian's etcd-server and etcd-client), the tests fail saying so: a
//! skipped test would read as a pass.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::server::collect;
use super::wait::wait_until;

/// What to install when a binary is missing.
const INSTALL: &str = "the registry tests run etcd and etcdctl: apt-get install etcd-server etcd-client";

/// How long etcd may take to elect itself and answer (generous: CI may be building).
const START_LIMIT: Duration = Duration::from_secs(60);

/// A free port on loopback (free when this returns; nothing holds it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running single-member etcd, killed (and its data removed) when dropped.
pub struct Etcd {
    child: Child,
    /// Its client endpoint, `127.0.0.1:PORT`.
    pub endpoint: String,
    dir: PathBuf,
    stderr: Arc<Mutex<String>>,
}

impl Etcd {
    /// Starts etcd on free ports and waits until it reports itself healthy.
    pub fn start() -> Self {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("disagg-etcd-{}-{n}", std::process::id()));
        _ = std::fs::remove_dir_all(&dir);
        let (client, peer) = (format!("http://127.0.0.1:{}", free_port()), format!("http://127.0.0.1:{}", free_port()));
        let mut child = Command::new("etcd")
            .args(["--name", "registry-test", "--data-dir"])
            .arg(&dir)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("registry-test={peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{INSTALL} (starting `etcd`: {e})"));
        let stderr = Arc::new(Mutex::new(String::new()));
        collect(child.stderr.take().unwrap(), stderr.clone());
        let etcd = Self { child, endpoint: client.trim_start_matches("http://").to_string(), dir, stderr };
        let what = "etcd healthy";
        wait_until(START_LIMIT, what, || (etcd.healthy(), etcd.stderr.lock().unwrap().clone()), |(up, _)| *up);
        etcd
    }

    /// Whether its `/health` says so.
    fn healthy(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(&self.endpoint) else { return false };
        _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!("GET /health HTTP/1.0\r\nHost: {}\r\n\r\n", self.endpoint);
        let mut reply = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut reply).is_ok()
            && reply.contains("\"health\":\"true\"")
    }

    /// `etcdctl ARGS` against it; its stdout (panics if it fails).
    fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new("etcdctl")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{INSTALL} (running `etcdctl`: {e})"));
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        assert!(out.status.success(), "etcdctl {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &str) -> Option<String> {
        let value = self.ctl(&["get", key, "--print-value-only"]);
        (!value.is_empty()).then(|| value.trim_end_matches('\n').to_string())
    }

    /// Writes `value` at `key`.
    pub fn put(&self, key: &str, value: &str) {
        // `--` so that a value starting with a dash is not taken for a flag.
        self.ctl(&["put", key, "--", value]);
    }

    /// Starts watching the keys under `prefix`, recording when each event arrived.
    pub fn watch(&self, prefix: &str) -> Watch {
        let mut child = Command::new("etcdctl")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(["watch", "--prefix", prefix])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{INSTALL} (running `etcdctl watch`: {e})"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (stdout, seen) = (BufReader::new(child.stdout.take().unwrap()), lines.clone());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                seen.lock().unwrap().push((Instant::now(), line));
            }
        });
        Watch { child, lines }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        _ = self.child.kill();
        _ = self.child.wait();
        _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `etcdctl watch --prefix` running: each line it printed (an event's kind, then its key, then a
/// put's value), with when it arrived. Stopped when dropped.
pub struct Watch {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Watch {
    /// When the deletion of `key` arrived, if it did.
    pub fn deleted(&self, key: &str) -> Option<Instant> {
        let lines = self.lines.lock().unwrap();
        lines.windows(2).find(|w| w[0].1 == "DELETE" && w[1].1 == key).map(|w| w[1].0)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        _ = self.child.kill();
        _ = self.child.wait();
    }
}
