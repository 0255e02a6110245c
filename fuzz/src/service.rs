//! Targets for the service's wire protocol (docs/service.md), through
//! gvault-service's public API: a request body as the daemon decodes it, a
//! reply body as a client decodes it, and the framing of a byte stream over
//! a real Unix socket pair as both sides read it.
//!
//! The protocol has no checksums (a socket does not corrupt bytes), so the
//! inputs go to the decoders as they are.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

use gvault_service::protocol::{Reply, Request, MAX_REPLY_BODY, MAX_REQUEST_BODY};
use gvault_service::socket::{Frame, FrameReader};

use crate::capped;

/// A request body as the daemon's reader decodes one. A request encodes in
/// exactly one way, so what decodes must encode back to the same bytes, and
/// those decode to the same request.
pub fn service_request(data: &[u8]) {
    let data = capped(data);
    let Ok((id, req)) = Request::decode(data) else {
        return;
    };
    let body = req.encode(id);
    assert!(body == data, "a request re-encodes to other bytes");
    let (id2, again) = Request::decode(&body).expect("an encoded request decodes");
    assert_eq!(id2, id, "request id round trip");
    assert_eq!(again, req, "request round trip");
}

/// A reply body as a client's reply reader decodes one. Replies are not
/// canonical on the wire (an unknown error code reads as `Internal`, an
/// unknown backend name as "daemon"), so the assertion is on values: what
/// decodes encodes to bytes that decode to the same reply, and encoding is
/// then stable.
pub fn service_reply(data: &[u8]) {
    let data = capped(data);
    let Ok((id, reply)) = Reply::decode(data) else {
        return;
    };
    let body = reply.encode(id);
    let (id2, again) = Reply::decode(&body).expect("an encoded reply decodes");
    assert_eq!(id2, id, "reply id round trip");
    assert_eq!(again, reply, "reply round trip");
    assert!(
        again.encode(id2) == body,
        "a reply's encoding is not stable"
    );
}

/// The frame target's inputs are cut here: enough for several maximal
/// reads (`FrameReader` reads 64 KiB at a time) without making each run
/// slow.
pub const FRAMES_MAX_INPUT: usize = 256 << 10;

/// Frame-size limits the first input byte picks from (low 3 bits): the
/// real ones and small ones, so that the limit check is reached.
const FRAME_LIMITS: [u32; 8] = [MAX_REQUEST_BODY, MAX_REPLY_BODY, 0, 1, 9, 64, 4096, 65536];

/// Write sizes the first input byte picks from (high 4 bits): how the
/// stream is cut into `write`s (each followed by reading every frame that
/// is complete), so that frames arrive whole, torn and many at once.
const CHUNKS: [usize; 16] = [
    1,
    2,
    3,
    4,
    5,
    7,
    9,
    13,
    64,
    100,
    1000,
    4096,
    65535,
    65536,
    65537,
    usize::MAX,
];

/// How a stream of frames must read: the bodies in order, then how it ends.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The peer closed between frames.
    Closed,
    /// A length prefix over the limit.
    TooLong,
    /// The peer closed inside a frame.
    Torn,
}

fn model(stream: &[u8], max: u32) -> (Vec<&[u8]>, End) {
    let mut bodies = Vec::new();
    let mut rest = stream;
    loop {
        if rest.is_empty() {
            return (bodies, End::Closed);
        }
        let Some((len, after)) = rest.split_first_chunk::<4>() else {
            return (bodies, End::Torn);
        };
        let len = u32::from_le_bytes(*len);
        if len > max {
            return (bodies, End::TooLong);
        }
        let Some((body, next)) = after.split_at_checked(len as usize) else {
            return (bodies, End::Torn);
        };
        bodies.push(body);
        rest = next;
    }
}

/// An open file to pass over the socket (SCM_RIGHTS).
fn passed_fd() -> &'static std::fs::File {
    static FILE: OnceLock<std::fs::File> = OnceLock::new();
    FILE.get_or_init(|| std::fs::File::open("/dev/null").expect("opening /dev/null"))
}

/// Writes `bytes` without blocking: with a file descriptor riding on the
/// first byte (as the daemon sends a buffer's memfd) when `fd` is set.
/// Returns how many bytes went and whether a descriptor went with them.
fn send(w: &UnixStream, bytes: &[u8], fd: bool) -> io::Result<(usize, bool)> {
    if !fd {
        return (&*w).write(bytes).map(|n| (n, false));
    }
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [passed_fd().as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let iov = [io::IoSlice::new(bytes)];
    match sendmsg(w.as_fd(), &iov, &mut control, SendFlags::NOSIGNAL) {
        Ok(n) => Ok((n, n > 0)),
        Err(e) => Err(e.into()),
    }
}

/// A byte stream through `FrameReader`, the framing both sides read with,
/// over a real socket pair. The first byte picks the frame limit, whether
/// the reader takes descriptors (the client does, the daemon does not) and
/// the write size; the rest is the stream. Every other write carries a
/// descriptor. The reader must give exactly the frames the stream holds,
/// then end as it says (closed, too long, torn), wait for more without
/// losing its place, and hold every descriptor sent (none when it does not
/// take them).
pub fn service_frames(data: &[u8]) {
    let data = &data[..data.len().min(FRAMES_MAX_INPUT)];
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let max = FRAME_LIMITS[usize::from(mode & 7)];
    let take_fds = mode & 8 != 0;
    // At most 64 writes: byte by byte for short streams only.
    let chunk = CHUNKS[usize::from(mode >> 4)].max(stream.len().div_ceil(64));
    let (bodies, end) = model(stream, max);

    let (w, r) = UnixStream::pair().expect("a socket pair");
    w.set_nonblocking(true).expect("non-blocking writer");
    r.set_nonblocking(true).expect("non-blocking reader");
    let mut reader = FrameReader::new(r, max, take_fds);
    let (mut pos, mut writes, mut fds_sent, mut shut) = (0usize, 0usize, 0usize, false);
    let mut got = 0usize;
    let mut fds_taken = 0usize;
    loop {
        if pos < stream.len() {
            let to = stream.len().min(pos.saturating_add(chunk));
            match send(&w, &stream[pos..to], writes % 2 == 1) {
                Ok((n, fd)) => {
                    pos += n;
                    fds_sent += usize::from(fd);
                    writes += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("writing the stream: {e}"),
            }
        } else if !shut {
            w.shutdown(std::net::Shutdown::Write)
                .expect("closing the writer");
            shut = true;
        }
        // Every frame complete so far, until the reader would wait.
        loop {
            let next = reader.next_frame();
            while reader.take_fd().is_some() {
                fds_taken += 1;
            }
            match next {
                Ok(Frame::Body(b)) => {
                    assert!(got < bodies.len(), "a frame the stream does not hold");
                    assert!(b == bodies[got], "frame {got} differs from the stream's");
                    got += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(!shut, "the reader waits on a closed stream");
                    break;
                }
                Ok(Frame::Closed) => {
                    assert_eq!(end, End::Closed, "the stream ends otherwise");
                    assert_eq!(got, bodies.len(), "frames left unread at the end");
                    assert!(
                        shut && pos == stream.len(),
                        "closed before the end was sent"
                    );
                    let expected = if take_fds { fds_sent } else { 0 };
                    assert_eq!(fds_taken, expected, "descriptors lost or invented");
                    return;
                }
                Err(e) => {
                    let kind = match e.kind() {
                        io::ErrorKind::InvalidData => End::TooLong,
                        io::ErrorKind::UnexpectedEof => End::Torn,
                        _ => panic!("reading frames: {e}"),
                    };
                    assert_eq!(kind, end, "the stream ends otherwise ({e})");
                    assert_eq!(got, bodies.len(), "an error before every frame was read");
                    // A torn stream was read to its end, so every descriptor
                    // arrived; a refused prefix may leave some unread.
                    if kind == End::Torn || !take_fds {
                        let expected = if take_fds { fds_sent } else { 0 };
                        assert_eq!(fds_taken, expected, "descriptors lost or invented");
                    }
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_reads_frames_as_the_protocol_says() {
        let mut s = Vec::new();
        s.extend_from_slice(&3u32.to_le_bytes());
        s.extend_from_slice(b"abc");
        s.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(model(&s, 3), (vec![&b"abc"[..], &b""[..]], End::Closed));
        assert_eq!(model(&s, 2), (vec![], End::TooLong));
        assert_eq!(model(&s[..9], 3), (vec![&b"abc"[..]], End::Torn));
        assert_eq!(model(&s[..5], 3), (vec![], End::Torn));
    }

    #[test]
    fn every_mode_reads_a_stream_of_frames() {
        let mut s = Vec::new();
        for n in [0usize, 1, 70_000, 5, 0, 100_000] {
            s.extend_from_slice(&(n as u32).to_le_bytes());
            s.extend((0..n).map(|i| i as u8));
        }
        for mode in 0..=255u8 {
            let mut input = vec![mode];
            input.extend_from_slice(&s);
            service_frames(&input);
            input.truncate(input.len() - 1);
            service_frames(&input);
        }
    }
}
