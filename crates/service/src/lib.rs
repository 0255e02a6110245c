//! gvault-service: the accelerators as a service shared by every process
//! (seed 004, in user space).
//!
//! - [`server`]: the daemon behind `gvault serve`. It owns one backend
//!   (every CPU core and GPU), listens on a Unix socket guarded by its mode
//!   and by each peer's credentials, hands each client zero-filled shared
//!   memory (memfd, registered with the GPU once), and runs requests from
//!   per-operation queues, small ones from many clients coalesced into one
//!   job, large ones pipelined over several workers.
//! - [`ServiceBackend`]: the client, an accel `Backend`, so anything that
//!   runs on a local accelerator runs unchanged against the daemon.
//! - [`protocol`]: the versioned wire format (`docs/service.md` pins it);
//!   [`wire`], [`socket`] and [`shm`] are its byte-, frame- and
//!   memory-level parts.

pub mod client;
pub mod protocol;
pub mod server;
pub mod shm;
pub mod socket;
pub mod wire;

pub use client::{service_or_local, socket_from_spec, ServiceBackend, SharedBuffer};
pub use server::{
    default_socket, systemd_listener, Access, BatchPolicy, Daemon, DaemonHandle, ServeConfig,
};
