//! Bounds-checked little-endian reading and writing of message bodies: every
//! read names what it wanted, so a short or hostile message becomes an error
//! that says where it broke, never a panic.

use crate::protocol::ProtoError;

/// A cursor over a received message body.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(ProtoError::Truncated(what))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProtoError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A u32 length then that many bytes, at most `max`.
    pub fn blob(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(ProtoError::TooLong { what, len: n, max });
        }
        self.bytes(n, what)
    }

    /// A blob that must be UTF-8.
    pub fn string(&mut self, max: usize, what: &'static str) -> Result<String, ProtoError> {
        let b = self.blob(max, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Invalid(what))
    }

    /// A count of items that each take at least `min_item` bytes: refused
    /// when the rest of the message cannot hold that many, so a hostile
    /// count never reserves memory.
    pub fn count(&mut self, min_item: usize, what: &'static str) -> Result<usize, ProtoError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(ProtoError::Truncated(what));
        }
        Ok(n)
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Ends decoding: trailing bytes are an error (a message means one thing).
    pub fn finish(self) -> Result<(), ProtoError> {
        if self.remaining() != 0 {
            return Err(ProtoError::Trailing(self.remaining()));
        }
        Ok(())
    }
}

/// A message body under construction.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    /// A u32 length then the bytes (lengths here are bounded by the frame).
    pub fn blob(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32).raw(b)
    }
}
