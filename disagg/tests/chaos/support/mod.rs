//! What the chaos tests share: real `disagg` processes with bounded waits, and a TCP proxy that
//! breaks the link between them on cue.

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod proxy;
pub mod server;
pub mod wait;
pub mod worker;
