//! Atomic write batches, and how a group of them is laid out in the value
//! log: large values as value frames, then one commit frame listing every
//! record of every batch in the group. A group counts only once its commit
//! frame is read back intact, which is what makes each batch atomic.

use crate::coding::{put_bytes, put_u64, put_varint, Decoder};
use crate::format::{BlockHandle, ValueType, MAX_SEQUENCE};

/// Puts and deletes applied together or not at all.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(crate) ops: Vec<BatchOp>,
    bytes: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BatchOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let (k, v) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        self.bytes += k.len() + v.len() + 16;
        self.ops.push(BatchOp::Put(k, v));
    }

    pub fn delete(&mut self, key: impl AsRef<[u8]>) {
        let k = key.as_ref().to_vec();
        self.bytes += k.len() + 16;
        self.ops.push(BatchOp::Delete(k));
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
    }

    /// Approximate encoded size, for sizing groups.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes
    }
}

/// One record as the commit frame holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogRecord<'a> {
    pub seq: u64,
    pub value_type: ValueType,
    pub key: &'a [u8],
    /// Inline: the value; Pointer: the value frame in this same file;
    /// Deletion: empty.
    pub value: &'a [u8],
    pub frame: Option<BlockHandle>,
}

/// Payload of a value frame: the key (so a pointer can be checked against
/// the key that followed it, and GC can read frames alone) and the value.
/// Appends it to `dst`.
pub(crate) fn encode_value_frame_into(dst: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    put_bytes(dst, key);
    dst.extend_from_slice(value);
}

pub(crate) fn decode_value_frame(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut d = Decoder::new(payload);
    let key = d.bytes()?;
    Some((key, d.rest()))
}

/// Builds a commit payload: for each batch its first sequence number and
/// record count, then its records.
pub(crate) struct CommitBuilder {
    buf: Vec<u8>,
}

impl CommitBuilder {
    /// A builder that appends to `buf` (the frame group's buffer, so the
    /// payload is written where it is sealed: no copy, no allocation).
    pub fn appending_to(buf: Vec<u8>) -> Self {
        CommitBuilder { buf }
    }

    pub fn start_batch(&mut self, first_seq: u64, count: usize) {
        put_u64(&mut self.buf, first_seq);
        put_varint(&mut self.buf, count as u64);
    }

    pub fn inline(&mut self, key: &[u8], value: &[u8]) {
        self.buf.push(ValueType::Inline as u8);
        put_bytes(&mut self.buf, key);
        put_bytes(&mut self.buf, value);
    }

    pub fn pointer(&mut self, key: &[u8], frame: BlockHandle) {
        self.buf.push(ValueType::Pointer as u8);
        put_bytes(&mut self.buf, key);
        frame.encode_to(&mut self.buf);
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.buf.push(ValueType::Deletion as u8);
        put_bytes(&mut self.buf, key);
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Decodes a commit payload; `None` if it is malformed.
pub(crate) fn decode_commit(payload: &[u8]) -> Option<Vec<LogRecord<'_>>> {
    let mut d = Decoder::new(payload);
    let mut out = Vec::new();
    while !d.is_empty() {
        let first = d.u64()?;
        let count = d.varint()?;
        for i in 0..count {
            // Sequence numbers are 56 bits: a larger one would not fit an
            // internal key's trailer and would sort as another number.
            let seq = first.checked_add(i).filter(|s| *s <= MAX_SEQUENCE)?;
            let t = ValueType::from_u8(d.u8()?)?;
            let key = d.bytes()?;
            let (value, frame) = match t {
                ValueType::Deletion => (&[][..], None),
                ValueType::Inline => (d.bytes()?, None),
                ValueType::Pointer => (&[][..], Some(BlockHandle::decode_from(&mut d)?)),
            };
            out.push(LogRecord {
                seq,
                value_type: t,
                key,
                value,
                frame,
            });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_number_past_56_bits_is_malformed() {
        let mut c = CommitBuilder::appending_to(Vec::new());
        c.start_batch(MAX_SEQUENCE, 1);
        c.inline(b"a", b"1");
        assert!(decode_commit(&c.finish()).is_some());
        for (first, count) in [(MAX_SEQUENCE, 2), (MAX_SEQUENCE + 1, 1), (u64::MAX, 1)] {
            let mut c = CommitBuilder::appending_to(Vec::new());
            c.start_batch(first, count);
            for _ in 0..count {
                c.inline(b"a", b"1");
            }
            assert!(decode_commit(&c.finish()).is_none(), "{first} x {count}");
        }
    }

    #[test]
    fn commit_round_trip() {
        let mut c = CommitBuilder::appending_to(Vec::new());
        c.start_batch(10, 2);
        c.inline(b"a", b"1");
        c.delete(b"b");
        c.start_batch(12, 1);
        let h = BlockHandle {
            offset: 24,
            len: 100,
            block: 3,
        };
        c.pointer(b"c", h);
        let p = c.finish();
        let recs = decode_commit(&p).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[1].seq, 11);
        assert_eq!(recs[1].value_type, ValueType::Deletion);
        assert_eq!(recs[2].frame, Some(h));
        assert!(decode_commit(&p[..p.len() - 1]).is_none());
    }
}
