//! A version is the set of files that make up the store at one moment:
//! tables by level, value-log files, the replay pointer. Versions are
//! immutable and shared through `Arc`; a [`VersionEdit`] (what the manifest
//! records) turns one into the next.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::coding::{put_bytes, put_varint, Decoder};
use crate::format::{compare_internal, user_key, LogPosition, MAX_SEQUENCE};

pub const NUM_LEVELS: usize = 7;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub number: u64,
    pub size: u64,
    /// Smallest and largest internal keys.
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
}

impl FileMeta {
    pub fn smallest_user(&self) -> &[u8] {
        user_key(&self.smallest)
    }
    pub fn largest_user(&self) -> &[u8] {
        user_key(&self.largest)
    }
    /// Whether the file's user-key range meets [lo, hi] (None: unbounded).
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        !(lo.is_some_and(|lo| self.largest_user() < lo)
            || hi.is_some_and(|hi| self.smallest_user() > hi))
    }
}

/// A value-log file; `sealed` is its final (size, block count) once the log
/// moved on to a newer file, so a shortened old file is detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMeta {
    pub number: u64,
    pub sealed: Option<(u64, u32)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    pub last_sequence: Option<u64>,
    pub next_file_number: Option<u64>,
    pub replay: Option<LogPosition>,
    pub added_tables: Vec<(usize, FileMeta)>,
    pub deleted_tables: Vec<(usize, u64)>,
    pub added_logs: Vec<u64>,
    pub sealed_logs: Vec<(u64, u64, u32)>,
    pub deleted_logs: Vec<u64>,
}

mod tag {
    pub const LAST_SEQUENCE: u64 = 1;
    pub const NEXT_FILE: u64 = 2;
    pub const REPLAY: u64 = 3;
    pub const ADD_TABLE: u64 = 4;
    pub const DELETE_TABLE: u64 = 5;
    pub const ADD_LOG: u64 = 6;
    pub const SEAL_LOG: u64 = 7;
    pub const DELETE_LOG: u64 = 8;
}

impl VersionEdit {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        if let Some(s) = self.last_sequence {
            put_varint(&mut b, tag::LAST_SEQUENCE);
            put_varint(&mut b, s);
        }
        if let Some(n) = self.next_file_number {
            put_varint(&mut b, tag::NEXT_FILE);
            put_varint(&mut b, n);
        }
        if let Some(p) = self.replay {
            put_varint(&mut b, tag::REPLAY);
            p.encode_to(&mut b);
        }
        for (level, f) in &self.added_tables {
            put_varint(&mut b, tag::ADD_TABLE);
            put_varint(&mut b, *level as u64);
            put_varint(&mut b, f.number);
            put_varint(&mut b, f.size);
            put_bytes(&mut b, &f.smallest);
            put_bytes(&mut b, &f.largest);
        }
        for (level, n) in &self.deleted_tables {
            put_varint(&mut b, tag::DELETE_TABLE);
            put_varint(&mut b, *level as u64);
            put_varint(&mut b, *n);
        }
        for n in &self.added_logs {
            put_varint(&mut b, tag::ADD_LOG);
            put_varint(&mut b, *n);
        }
        for (n, size, blocks) in &self.sealed_logs {
            put_varint(&mut b, tag::SEAL_LOG);
            put_varint(&mut b, *n);
            put_varint(&mut b, *size);
            put_varint(&mut b, u64::from(*blocks));
        }
        for n in &self.deleted_logs {
            put_varint(&mut b, tag::DELETE_LOG);
            put_varint(&mut b, *n);
        }
        b
    }

    pub fn decode(buf: &[u8]) -> Option<VersionEdit> {
        let mut d = Decoder::new(buf);
        let mut e = VersionEdit::default();
        let level = |d: &mut Decoder<'_>| -> Option<usize> {
            let l = d.varint()? as usize;
            (l < NUM_LEVELS).then_some(l)
        };
        while !d.is_empty() {
            match d.varint()? {
                tag::LAST_SEQUENCE => e.last_sequence = Some(d.varint()?),
                tag::NEXT_FILE => e.next_file_number = Some(d.varint()?),
                tag::REPLAY => e.replay = Some(LogPosition::decode_from(&mut d)?),
                tag::ADD_TABLE => {
                    let l = level(&mut d)?;
                    let f = FileMeta {
                        number: d.varint()?,
                        size: d.varint()?,
                        smallest: d.bytes()?.to_vec(),
                        largest: d.bytes()?.to_vec(),
                    };
                    e.added_tables.push((l, f));
                }
                tag::DELETE_TABLE => {
                    let l = level(&mut d)?;
                    e.deleted_tables.push((l, d.varint()?));
                }
                tag::ADD_LOG => e.added_logs.push(d.varint()?),
                tag::SEAL_LOG => e
                    .sealed_logs
                    .push((d.varint()?, d.varint()?, d.varint_u32()?)),
                tag::DELETE_LOG => e.deleted_logs.push(d.varint()?),
                _ => return None,
            }
        }
        Some(e)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Version {
    pub levels: [Vec<Arc<FileMeta>>; NUM_LEVELS],
    pub logs: BTreeMap<u64, LogMeta>,
    pub replay: LogPosition,
    pub last_sequence: u64,
    pub next_file_number: u64,
}

impl Version {
    /// The version after `edit`; `Err` names what does not fit.
    pub fn apply(&self, edit: &VersionEdit) -> Result<Version, String> {
        let mut v = self.clone();
        if let Some(s) = edit.last_sequence {
            if s > MAX_SEQUENCE {
                return Err(format!(
                    "last sequence {s} does not fit in 56 bits (the most a key can hold)"
                ));
            }
            v.last_sequence = v.last_sequence.max(s);
        }
        if let Some(n) = edit.next_file_number {
            v.next_file_number = v.next_file_number.max(n);
        }
        if let Some(p) = edit.replay {
            v.replay = p;
        }
        for (level, n) in &edit.deleted_tables {
            let before = v.levels[*level].len();
            v.levels[*level].retain(|f| f.number != *n);
            if v.levels[*level].len() == before {
                return Err(format!(
                    "edit deletes table {n} which is not in level {level}"
                ));
            }
        }
        for (level, f) in &edit.added_tables {
            v.levels[*level].push(Arc::new(f.clone()));
        }
        for level in &mut v.levels[1..] {
            level.sort_by(|a, b| compare_internal(&a.smallest, &b.smallest));
        }
        // Level 0 newest first: a lookup takes the first match.
        v.levels[0].sort_by_key(|f| std::cmp::Reverse(f.number));
        for n in &edit.added_logs {
            v.logs.insert(
                *n,
                LogMeta {
                    number: *n,
                    sealed: None,
                },
            );
        }
        for (n, size, blocks) in &edit.sealed_logs {
            let Some(l) = v.logs.get_mut(n) else {
                return Err(format!("edit seals value log {n} which is not live"));
            };
            l.sealed = Some((*size, *blocks));
        }
        for n in &edit.deleted_logs {
            if v.logs.remove(n).is_none() {
                return Err(format!("edit deletes value log {n} which is not live"));
            }
        }
        Ok(v)
    }

    /// One edit that rebuilds this version from nothing: the first record
    /// of a new manifest.
    pub fn snapshot_edit(&self) -> VersionEdit {
        let mut e = VersionEdit {
            last_sequence: Some(self.last_sequence),
            next_file_number: Some(self.next_file_number),
            replay: Some(self.replay),
            ..Default::default()
        };
        for (l, files) in self.levels.iter().enumerate() {
            for f in files {
                e.added_tables.push((l, (**f).clone()));
            }
        }
        for l in self.logs.values() {
            e.added_logs.push(l.number);
            if let Some((size, blocks)) = l.sealed {
                e.sealed_logs.push((l.number, size, blocks));
            }
        }
        e
    }

    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|f| f.size).sum()
    }

    /// Files of `level` whose user-key range meets [lo, hi].
    pub fn overlapping(
        &self,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Vec<Arc<FileMeta>> {
        self.levels[level]
            .iter()
            .filter(|f| f.overlaps(lo, hi))
            .cloned()
            .collect()
    }

    pub fn table_numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels.iter().flatten().map(|f| f.number)
    }

    /// The newest value-log file (the one being appended to).
    pub fn head_log(&self) -> Option<u64> {
        self.logs.keys().next_back().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::internal_key;

    #[test]
    fn a_last_sequence_past_56_bits_does_not_apply() {
        let edit = |s| VersionEdit {
            last_sequence: Some(s),
            ..VersionEdit::default()
        };
        assert!(Version::default().apply(&edit(MAX_SEQUENCE)).is_ok());
        let e = Version::default()
            .apply(&edit(MAX_SEQUENCE + 1))
            .unwrap_err();
        assert!(e.contains("56 bits"), "{e}");
    }

    #[test]
    fn edit_round_trip_and_apply() {
        let f = FileMeta {
            number: 9,
            size: 100,
            smallest: internal_key(b"a", 1, 1),
            largest: internal_key(b"m", 2, 1),
        };
        let e = VersionEdit {
            last_sequence: Some(5),
            next_file_number: Some(10),
            replay: Some(LogPosition {
                file: 3,
                offset: 24,
                block: 0,
            }),
            added_tables: vec![(1, f.clone())],
            deleted_tables: vec![],
            added_logs: vec![3],
            sealed_logs: vec![(3, 1000, 4)],
            deleted_logs: vec![],
        };
        let enc = e.encode();
        assert_eq!(VersionEdit::decode(&enc), Some(e.clone()));
        assert!(VersionEdit::decode(&enc[..enc.len() - 1]).is_none());
        let v = Version::default().apply(&e).unwrap();
        assert_eq!(v.levels[1].len(), 1);
        assert_eq!(v.logs[&3].sealed, Some((1000, 4)));
        let again = Version::default().apply(&v.snapshot_edit()).unwrap();
        assert_eq!(again.levels[1][0].number, 9);
        assert!(v
            .apply(&VersionEdit {
                deleted_tables: vec![(2, 9)],
                ..Default::default()
            })
            .is_err());
    }
}
