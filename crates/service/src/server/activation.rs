//! systemd socket activation: a listening socket handed over as fd 3 when
//! `LISTEN_PID` names this process and `LISTEN_FDS` is at least 1
//! (sd_listen_fds(3)).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;

/// The first descriptor systemd passes.
const SD_LISTEN_FDS_START: i32 = 3;

/// The socket systemd passed, if any; the variables are cleared so that
/// child processes do not take it too.
pub fn systemd_listener() -> Option<UnixListener> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let fds: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    if pid != std::process::id() || fds < 1 {
        return None;
    }
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    // The descriptor must be an open socket nobody else owns: check it is
    // a stream socket before adopting it (one of another family would
    // admit nobody: peer credentials exist for Unix sockets only).
    // SAFETY: fd 3 is open (LISTEN_FDS >= 1 for this pid, per systemd's
    // protocol) and owned by nobody else in this process; it is adopted
    // once (the variables are gone now).
    let fd = unsafe { OwnedFd::from_raw_fd(SD_LISTEN_FDS_START) };
    let ok =
        rustix::net::sockopt::socket_type(&fd).is_ok_and(|t| t == rustix::net::SocketType::STREAM);
    if !ok {
        eprintln!("gvault serve: warning: LISTEN_FDS is set but fd 3 is not a stream socket");
        std::mem::forget(fd);
        return None;
    }
    Some(UnixListener::from(fd))
}
