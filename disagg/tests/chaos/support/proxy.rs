//! A TCP proxy between a decode worker and a prefill server that breaks the link on cue. It
//! forwards the worker's bytes as they come, and the server's frame by frame (it reads each
//! frame's header to find where the frame ends), asking a rule what to do with each frame:
//! pass it, flip a byte of its payload, cut the connection in its middle (killing the server
//! there), or stall the link in both directions with the connections left open.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burn_kvtransfer::wire::{FrameCodec, FrameKind, HEADER_LEN, TRAILER_LEN};

/// What the proxy does to one frame from the server.
pub enum Fault {
    /// Forward it unchanged.
    Pass,
    /// Flip every bit of the byte in the middle of its payload, then forward it.
    Flip,
    /// Forward its first half, call the proxy's `on_cut` (which kills the server), then close
    /// the worker's connection: the worker sees the stream end inside a frame.
    Cut,
    /// Forward nothing more, either way, keeping both connections open until the proxy is
    /// dropped.
    Stall,
}

/// Decides each server frame's fate from its kind and how many frames of that kind the proxy
/// saw before it (over all its connections).
type Rule = Box<dyn FnMut(FrameKind, usize) -> Fault + Send>;

/// What the proxy's threads share.
struct State {
    upstream: String,
    rule: Mutex<Rule>,
    on_cut: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Frames of each kind (by its byte) seen from the server.
    seen: Mutex<[usize; 256]>,
    flipped: AtomicUsize,
    stalled: AtomicBool,
    stopped: AtomicBool,
    /// Every connection's two streams, shut down when the proxy is dropped.
    streams: Mutex<Vec<TcpStream>>,
}

/// A running proxy; dropping it closes every connection through it.
pub struct Proxy {
    /// Where the worker connects.
    pub addr: String,
    state: Arc<State>,
}

impl Proxy {
    /// A proxy to `upstream` that treats the server's frames by `rule`; `on_cut` runs at a
    /// [`Fault::Cut`].
    pub fn start(
        upstream: &str,
        rule: impl FnMut(FrameKind, usize) -> Fault + Send + 'static,
        on_cut: impl FnOnce() + Send + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(State {
            upstream: upstream.to_string(),
            rule: Mutex::new(Box::new(rule)),
            on_cut: Mutex::new(Some(Box::new(on_cut))),
            seen: Mutex::new([0; 256]),
            flipped: AtomicUsize::new(0),
            stalled: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            streams: Mutex::default(),
        });
        let accepting = state.clone();
        std::thread::spawn(move || {
            for worker in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(worker) = worker else { return };
                let server = TcpStream::connect(&accepting.upstream).expect("the proxy reaches the server");
                accepting.streams.lock().unwrap().extend([worker.try_clone().unwrap(), server.try_clone().unwrap()]);
                let (s1, w1) = (server.try_clone().unwrap(), worker.try_clone().unwrap());
                let state = accepting.clone();
                std::thread::spawn(move || state.worker_to_server(w1, s1));
                let state = accepting.clone();
                std::thread::spawn(move || state.server_to_worker(server, worker));
            }
        });
        Self { addr, state }
    }

    /// A proxy whose rule never cuts (nothing to kill at a [`Fault::Cut`]).
    pub fn faulting(upstream: &str, rule: impl FnMut(FrameKind, usize) -> Fault + Send + 'static) -> Self {
        Self::start(upstream, rule, || {})
    }

    /// Frames whose payload it corrupted.
    pub fn flipped(&self) -> usize {
        self.state.flipped.load(Ordering::SeqCst)
    }

    /// Whether it stalled the link.
    pub fn stalled(&self) -> bool {
        self.state.stalled.load(Ordering::SeqCst)
    }

    /// Frames of `kind` seen from the server.
    pub fn seen(&self, kind: FrameKind) -> usize {
        self.state.seen.lock().unwrap()[kind as usize]
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        for stream in self.state.streams.lock().unwrap().drain(..) {
            _ = stream.shutdown(Shutdown::Both);
        }
        // Wakes the accepting thread, which then sees `stopped`.
        _ = TcpStream::connect(&self.addr);
    }
}

impl State {
    /// Waits, the link stalled, until the proxy is dropped.
    fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
        while !self.stopped.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Forwards the worker's bytes until either side ends (passing the end on) or the link
    /// stalls (then drops what the worker sends).
    fn worker_to_server(&self, mut worker: TcpStream, mut server: TcpStream) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match worker.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if self.stalled.load(Ordering::SeqCst) {
                continue;
            }
            if server.write_all(&chunk[..n]).is_err() {
                break;
            }
        }
        if !self.stalled.load(Ordering::SeqCst) {
            _ = server.shutdown(Shutdown::Write);
        }
    }

    /// Forwards the server's frames one at a time, each as the rule says, until either side ends
    /// (passing the end on).
    fn server_to_worker(&self, mut server: TcpStream, mut worker: TcpStream) {
        let codec = FrameCodec::new(u32::MAX);
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 256 * 1024];
        loop {
            // Every whole frame buffered, in order.
            while let Some(total) = codec.frame_len(&buf).expect("the server sends sound frame headers") {
                if buf.len() < total {
                    break;
                }
                let mut frame: Vec<u8> = buf.drain(..total).collect();
                let kind = kind_of(frame[6]);
                let nth = {
                    let mut seen = self.seen.lock().unwrap();
                    seen[frame[6] as usize] += 1;
                    seen[frame[6] as usize] - 1
                };
                let fault = (self.rule.lock().unwrap())(kind, nth);
                match fault {
                    Fault::Pass => {}
                    Fault::Flip => {
                        frame[HEADER_LEN + (total - HEADER_LEN - TRAILER_LEN) / 2] ^= 0xFF;
                        self.flipped.fetch_add(1, Ordering::SeqCst);
                    }
                    Fault::Cut => {
                        _ = worker.write_all(&frame[..total / 2]);
                        if let Some(kill) = self.on_cut.lock().unwrap().take() {
                            kill();
                        }
                        _ = worker.shutdown(Shutdown::Both);
                        return;
                    }
                    Fault::Stall => return self.stall(),
                }
                if worker.write_all(&frame).is_err() {
                    return;
                }
            }
            match server.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        if self.stalled.load(Ordering::SeqCst) {
            return self.stall();
        }
        // The server's end, at a frame boundary or not, passed on.
        _ = worker.write_all(&buf);
        _ = worker.shutdown(Shutdown::Write);
    }
}

/// The frame kind of a kind byte the server sent.
fn kind_of(byte: u8) -> FrameKind {
    const KINDS: [FrameKind; 10] = [
        FrameKind::Hello,
        FrameKind::Layout,
        FrameKind::Pull,
        FrameKind::Block,
        FrameKind::Complete,
        FrameKind::Error,
        FrameKind::Submit,
        FrameKind::Ready,
        FrameKind::Done,
        FrameKind::Attach,
    ];
    *KINDS.iter().find(|k| **k as u8 == byte).unwrap_or_else(|| panic!("frame kind {byte}"))
}
