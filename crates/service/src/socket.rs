//! Frames over a Unix stream socket, with file descriptors riding along as
//! SCM_RIGHTS, and the peer's credentials (SO_PEERCRED).

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Writes one frame (length prefix + body) and, if given, passes `fd` with
/// its first byte.
pub fn write_frame(stream: &UnixStream, body: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    write_bytes(stream, &frame, fd)
}

/// Writes `bytes` (blocking, within the socket's send timeout), passing
/// `fd` with the first of them if given.
pub fn write_bytes(
    stream: &UnixStream,
    bytes: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let mut w = stream;
    let Some(fd) = fd else {
        return w.write_all(bytes);
    };
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("ancillary buffer too small"));
    }
    // The fd goes with the first sendmsg; whatever it did not write
    // follows as plain bytes.
    let iov = [IoSlice::new(bytes)];
    let sent = loop {
        match sendmsg(stream.as_fd(), &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    w.write_all(&bytes[sent..])
}

/// Writes what fits now without blocking: the count written (0 when the
/// socket buffer is full).
pub fn write_now(stream: &UnixStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match rustix::net::send(stream, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return Ok(0),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reads frames from a stream, keeping the file descriptors that arrive
/// with them in order.
pub struct FrameReader {
    stream: UnixStream,
    /// Received bytes not yet consumed are `buf[start..end]`; the rest of
    /// `buf` is room for the next read (zeroed once, when it grows).
    buf: Vec<u8>,
    start: usize,
    end: usize,
    fds: VecDeque<OwnedFd>,
    max_body: u32,
    /// Whether to accept descriptors (the client does; the daemon closes
    /// any a client sends).
    take_fds: bool,
}

/// What reading a frame gave.
pub enum Frame {
    Body(Vec<u8>),
    /// The peer closed the connection between frames.
    Closed,
}

impl FrameReader {
    pub fn new(stream: UnixStream, max_body: u32, take_fds: bool) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            start: 0,
            end: 0,
            fds: VecDeque::new(),
            max_body,
            take_fds,
        }
    }

    /// The next frame's body. A length prefix over the limit is an
    /// `InvalidData` error before any of the body is read.
    pub fn next_frame(&mut self) -> io::Result<Frame> {
        loop {
            let have = self.end - self.start;
            let len = (have >= 4).then(|| {
                u32::from_le_bytes(
                    self.buf[self.start..self.start + 4]
                        .try_into()
                        .unwrap_or([0; 4]),
                )
            });
            if let Some(len) = len {
                if len > self.max_body {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("frame of {len} bytes, the limit is {}", self.max_body),
                    ));
                }
                let total = 4 + len as usize;
                if have >= total {
                    let body = self.buf[self.start + 4..self.start + total].to_vec();
                    self.start += total;
                    if self.start == self.end {
                        self.start = 0;
                        self.end = 0;
                        if self.buf.len() > 1 << 20 {
                            // A large reply passed: give its room back.
                            self.buf = Vec::new();
                        }
                    }
                    return Ok(Frame::Body(body));
                }
            }
            // The rest of the frame when its length is known (within
            // bounds), else one read's worth.
            let want = len.map_or(64 << 10, |len| {
                (4 + len as usize - have).clamp(64 << 10, 16 << 20)
            });
            if self.fill(want)? == 0 {
                return if self.end == self.start {
                    Ok(Frame::Closed)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a frame",
                    ))
                };
            }
        }
    }

    /// The oldest descriptor received and not yet taken.
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }

    /// Reads up to `want` more bytes.
    fn fill(&mut self, want: usize) -> io::Result<usize> {
        // Drop what was consumed before growing, so the buffer holds at
        // most one frame and one read's worth.
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < self.end + want {
            self.buf.resize(self.end + want, 0);
        }
        let old = self.end;
        let n = if self.take_fds {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(&mut self.buf[old..])];
            let r = loop {
                match recvmsg(
                    self.stream.as_fd(),
                    &mut iov,
                    &mut control,
                    RecvFlags::CMSG_CLOEXEC,
                ) {
                    Ok(r) => break r,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            for msg in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = msg {
                    self.fds.extend(fds);
                }
            }
            r.bytes
        } else {
            (&self.stream).read(&mut self.buf[old..])?
        };
        self.end = old + n;
        Ok(n)
    }
}

/// The peer's process id, user id and group id, from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_of(stream: &UnixStream) -> io::Result<Peer> {
    let c = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(Peer {
        pid: c.pid.as_raw_nonzero().get(),
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}
