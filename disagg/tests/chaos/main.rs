//! Process-level chaos in the two-process pipeline: real `disagg serve` and `disagg decode`
//! processes of the tiny random model on loopback, with the faults disaggregated serving meets
//! in production. A server is killed while a request streams ([`killed_server`]); a worker is
//! killed while the server holds its request ([`killed_worker`]); the link stalls past the
//! timeout ([`stalled_link`]); bytes are corrupted on the wire ([`corrupt_wire`]). Each case
//! checks the exact error or the recovery, that no token is printed or recorded from a broken
//! transfer, and that the server's held requests and the bytes of their layers return to idle.
//! The same processes also carry a load ([`load`]): 256 requests outstanding together, every
//! one's KV and tokens checked, each process's memory bounded. With the `etcd` feature, servers
//! found through a registry in a real etcd ([`registry`]): a SIGKILLed server leaves it within its
//! lease and is never pulled from again.
//!
//! The link's faults come from a TCP proxy in this process ([`support::proxy`]) that reads the
//! server's frame headers, so each fault hits the frame it names, not a byte offset that moves
//! with the timing. Every wait is bounded.

mod support;

mod corrupt_wire;
mod killed_server;
mod killed_worker;
mod load;
#[cfg(feature = "etcd")]
mod registry;
mod stalled_link;
