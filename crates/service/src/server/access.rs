//! Who may use the daemon. The socket file's mode is the first gate (0600:
//! the owner; 0660 with `--group`: the group too); the kernel's record of
//! each peer (SO_PEERCRED, and the supplementary groups the kernel lists
//! for its pid) is the second, checked on every connection, so a socket
//! whose mode someone loosened still admits only the owner, root and (with
//! a group) that group's members.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::socket::Peer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The daemon's own user.
    pub uid: u32,
    /// A group allowed in besides the owner.
    pub group: Option<u32>,
}

impl Access {
    pub fn owner_only() -> Self {
        Self {
            uid: rustix::process::getuid().as_raw(),
            group: None,
        }
    }

    pub fn with_group(gid: u32) -> Self {
        Self {
            group: Some(gid),
            ..Self::owner_only()
        }
    }

    /// Whether a peer may use the daemon: the daemon's own user, root, or
    /// (with a group) a process in that group, primary or supplementary
    /// (`groups` lists a pid's supplementary groups).
    pub fn admits_with(&self, peer: &Peer, groups: impl Fn(i32) -> Vec<u32>) -> bool {
        if peer.uid == self.uid || peer.uid == 0 {
            return true;
        }
        match self.group {
            Some(g) => peer.gid == g || groups(peer.pid).contains(&g),
            None => false,
        }
    }

    /// [`Access::admits_with`] with the groups the kernel lists for the pid.
    pub fn admits(&self, peer: &Peer) -> bool {
        self.admits_with(peer, supplementary_groups)
    }

    /// The socket file's mode.
    pub fn mode(&self) -> u32 {
        if self.group.is_some() {
            0o660
        } else {
            0o600
        }
    }
}

/// The socket's directory must be this user's (or root's) and not
/// writable by others unless sticky (as /tmp is): otherwise someone else
/// could replace the socket with one of theirs and receive the keys
/// clients register (a `/tmp/gvault-<uid>` made by another user first).
fn check_socket_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)?;
    let me = rustix::process::getuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let owner_ok = meta.uid() == me || meta.uid() == 0;
    let writable_by_others = mode & 0o022 != 0 && mode & 0o1000 == 0;
    if !meta.is_dir() || !owner_ok || writable_by_others {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} must be a directory of uid {me} or root that others cannot write \
                 (it is uid {}, mode {mode:o})",
                dir.display(),
                meta.uid(),
            ),
        ));
    }
    Ok(())
}

/// The supplementary groups of process `pid` (the `Groups:` line of
/// `/proc/<pid>/status`); none when it cannot be read.
fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// Binds `path` with the access's mode (and group). The directory is made
/// (mode 0700) if missing. A socket file nobody answers on is stale and
/// replaced; one a daemon answers on is `AddrInUse`.
pub fn bind(path: &Path, access: &Access) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        } else {
            check_socket_dir(dir)?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; not replacing it",
                    path.display()
                ),
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("a gvault service already answers on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    // Bind under a restrictive umask so the socket is never, even briefly,
    // open to others; then set the exact mode and group.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    let listener = bound?;
    if let Some(gid) = access.group {
        rustix::fs::chown(path, None, Some(rustix::fs::Gid::from_raw(gid)))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode()))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer { pid: 1, uid, gid }
    }

    #[test]
    fn owner_only_admits_the_owner_and_root() {
        let a = Access {
            uid: 1000,
            group: None,
        };
        assert!(a.admits(&peer(1000, 1000)));
        assert!(a.admits(&peer(0, 0)));
        assert!(!a.admits(&peer(1001, 1000)), "another user, same group");
        assert!(!a.admits(&peer(65534, 65534)));
        assert_eq!(a.mode(), 0o600);
    }

    #[test]
    fn a_group_opens_the_socket_mode_to_it() {
        let a = Access {
            uid: 1000,
            group: Some(2000),
        };
        let none = |_| Vec::new();
        assert!(a.admits_with(&peer(1001, 2000), none), "primary group");
        assert!(
            a.admits_with(&peer(1001, 3000), |_| vec![5, 2000]),
            "supplementary"
        );
        assert!(
            !a.admits_with(&peer(1001, 3000), |_| vec![5]),
            "not a member"
        );
        assert!(a.admits_with(&peer(1000, 3000), none), "the owner");
        assert_eq!(a.mode(), 0o660);
    }

    #[test]
    fn this_process_groups_are_read_from_proc() {
        let me = std::process::id() as i32;
        let gid = rustix::process::getgid().as_raw();
        let a = Access {
            uid: u32::MAX - 1,
            group: Some(gid),
        };
        // Not the owner, not root only when the test runs as another user;
        // either way the primary group admits.
        assert!(a.admits(&peer_of_self(me, gid)));
    }

    fn peer_of_self(pid: i32, gid: u32) -> Peer {
        Peer {
            pid,
            uid: 4242,
            gid,
        }
    }
}
