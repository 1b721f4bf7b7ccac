//! A `disagg decode` process of the tiny random model, run to its end within a bound or killed.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kvcompress_cli::e2e_report::RequestRecord;

use super::server::collect;

/// How long a worker run may take at most (its model load and decoding included).
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A running decode worker against `servers`, killed when dropped.
pub struct Worker {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The threads collecting its output.
    collecting: Vec<JoinHandle<()>>,
    started: Instant,
    /// Where it writes its records (`--json`).
    pub json: PathBuf,
}

/// How a worker run ended.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// All it printed on stdout (the table, with `--check` its marks).
    pub stdout: String,
    /// All it printed on stderr (connection reports, the error).
    pub stderr: String,
    /// From its start to its end.
    pub elapsed: Duration,
    /// Its records, if it wrote them.
    pub records: Option<Vec<RequestRecord>>,
}

impl Finished {
    /// The error's cause as anyhow reports it (the first line after `Caused by:`).
    pub fn cause(&self) -> &str {
        let after = self.stderr.split("Caused by:").nth(1).unwrap_or_else(|| panic!("no cause:\n{}", self.stderr));
        after.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default()
    }

    /// The peak resident memory the worker said on stderr when its run ended (`[peak RSS N
    /// bytes]`).
    pub fn peak_rss_bytes(&self) -> u64 {
        let said = self.stderr.split("[peak RSS ").nth(1).and_then(|rest| rest.split(' ').next());
        said.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no peak RSS on stderr:\n{}", self.stderr))
    }

    /// The printed table's row of request `index`, split at spaces: request, prompt tokens,
    /// server, attempts, ..., tokens, KV check, token check.
    pub fn row(&self, index: usize) -> Vec<&str> {
        let row = self
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cells| cells.len() == 15 && cells[0] == index.to_string());
        row.unwrap_or_else(|| panic!("no row {index} in the table:\n{}", self.stdout))
    }
}

impl Worker {
    /// Starts `disagg decode --random-model tiny` against `servers` with `args` (a 160-token
    /// prompt and 4 new tokens unless `args` say otherwise), its records going to a fresh file
    /// named after `name`.
    pub fn start(name: &str, servers: &[&str], args: &[&str]) -> Self {
        let json = std::env::temp_dir().join(format!("disagg-chaos-{name}-{}.json", std::process::id()));
        _ = std::fs::remove_file(&json);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_disagg"));
        cmd.args(["decode", "--random-model", "tiny", "--max-new-tokens", "4"]);
        if !args.contains(&"--prompt-tokens") {
            cmd.args(["--prompt-tokens", "160"]);
        }
        for server in servers {
            cmd.args(["--server", server]);
        }
        cmd.args(args).arg("--json").arg(&json);
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("disagg decode starts");
        let (stdout, stderr) = (Arc::default(), Arc::default());
        let collecting = vec![
            collect(child.stdout.take().unwrap(), Arc::clone(&stdout)),
            collect(child.stderr.take().unwrap(), Arc::clone(&stderr)),
        ];
        Self { child, stdout, stderr, collecting, started: Instant::now(), json }
    }

    /// Runs [`Worker::start`] to its end.
    pub fn run(name: &str, servers: &[&str], args: &[&str]) -> Finished {
        Self::start(name, servers, args).finish()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the process has ended (its output may still be coming).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// SIGKILLs it and waits for it to exit.
    pub fn kill(mut self) -> Finished {
        self.child.kill().expect("SIGKILL the decode worker");
        self.finish()
    }

    /// Waits for it to end (at most [`RUN_LIMIT`], else kills it and panics).
    pub fn finish(mut self) -> Finished {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if self.started.elapsed() > RUN_LIMIT {
                _ = self.child.kill();
                panic!("the decode worker ran past {RUN_LIMIT:?}; stderr so far:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = self.started.elapsed();
        // The collecting threads end with the pipes, which end with the process.
        self.collecting.drain(..).for_each(|t| t.join().unwrap());
        let records = std::fs::read_to_string(&self.json).ok().map(|text| serde_json::from_str(&text).unwrap());
        _ = std::fs::remove_file(&self.json);
        let text = |s: &Arc<Mutex<String>>| s.lock().unwrap().clone();
        Finished { status, stdout: text(&self.stdout), stderr: text(&self.stderr), elapsed, records }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        _ = self.child.kill();
        _ = self.child.wait();
    }
}
