//! External sort of fixed-length byte records under a memory budget, so
//! that `prune` and `check --read-data` hold a bounded amount of memory
//! however many chunks the repository has (docs/repository.md §9).
//!
//! Records are compared as byte strings. While the records pushed fit in
//! the budget they stay in memory; beyond it each full buffer is sorted and
//! written to an anonymous temporary file (a run), and [`Sorter::finish`]
//! merges the runs and the last buffer with one small read buffer per run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// The default budget of one sorter: 64 MiB.
pub const DEFAULT_BUDGET: usize = 64 << 20;
/// Bookkeeping per record held in memory, beyond its bytes.
const PER_RECORD: usize = 16;
/// Read buffer of each run while merging.
const RUN_BUFFER: usize = 64 << 10;

static BUDGET: AtomicUsize = AtomicUsize::new(DEFAULT_BUDGET);
static SPILLED: AtomicUsize = AtomicUsize::new(0);

/// How many runs all sorters of this process wrote to temporary files (for
/// tests that the spilling paths ran).
#[doc(hidden)]
pub fn runs_spilled() -> usize {
    SPILLED.load(Ordering::Relaxed)
}

/// Sets the in-memory budget of every sorter created from now on (at least
/// one record is always held). Tests set it small so that the spilling
/// paths run.
#[doc(hidden)]
pub fn set_memory_budget(bytes: usize) {
    BUDGET.store(bytes, Ordering::Relaxed);
}

pub fn memory_budget() -> usize {
    BUDGET.load(Ordering::Relaxed)
}

fn tmp_err(e: std::io::Error) -> Error {
    Error::Io {
        context: "writing a temporary file of an external sort (TMPDIR names where)".into(),
        source: e,
    }
}

/// Collects records of `rec_len` bytes; [`finish`](Sorter::finish) yields them sorted.
pub struct Sorter {
    rec_len: usize,
    budget: usize,
    buf: Vec<Box<[u8]>>,
    runs: Vec<File>,
}

impl Sorter {
    pub fn new(rec_len: usize) -> Sorter {
        Sorter {
            rec_len,
            budget: memory_budget(),
            buf: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// How many runs went to temporary files so far.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    pub fn push(&mut self, rec: &[u8]) -> Result<()> {
        if rec.len() != self.rec_len {
            return Err(Error::InvalidArgument(format!(
                "external sort: record of {} bytes, expected {}",
                rec.len(),
                self.rec_len
            )));
        }
        self.buf.push(rec.into());
        if (self.buf.len() + 1) * (self.rec_len + PER_RECORD) > self.budget {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.buf.sort_unstable();
        let mut f = tempfile::tempfile().map_err(tmp_err)?;
        {
            let mut w = BufWriter::new(&mut f);
            for r in self.buf.drain(..) {
                w.write_all(&r).map_err(tmp_err)?;
            }
            w.flush().map_err(tmp_err)?;
        }
        f.seek(SeekFrom::Start(0)).map_err(tmp_err)?;
        self.runs.push(f);
        SPILLED.fetch_add(1, Ordering::Relaxed);
        self.buf = Vec::new();
        Ok(())
    }

    /// All records pushed, in ascending byte order (duplicates kept).
    pub fn finish(mut self) -> Result<Merged> {
        self.buf.sort_unstable();
        let mut sources: Vec<Source> = self
            .runs
            .into_iter()
            .map(|f| Source::Run(BufReader::with_capacity(RUN_BUFFER, f)))
            .collect();
        sources.push(Source::Mem(std::mem::take(&mut self.buf).into_iter()));
        let mut m = Merged {
            rec_len: self.rec_len,
            sources,
            heap: BinaryHeap::new(),
        };
        for i in 0..m.sources.len() {
            m.refill(i)?;
        }
        Ok(m)
    }
}

enum Source {
    Run(BufReader<File>),
    Mem(std::vec::IntoIter<Box<[u8]>>),
}

/// The sorted stream of a [`Sorter`].
pub struct Merged {
    rec_len: usize,
    sources: Vec<Source>,
    heap: BinaryHeap<Reverse<(Box<[u8]>, usize)>>,
}

impl Merged {
    fn refill(&mut self, i: usize) -> Result<()> {
        let next = match &mut self.sources[i] {
            Source::Mem(it) => it.next(),
            Source::Run(r) => {
                let mut b = vec![0u8; self.rec_len];
                match r.read_exact(&mut b) {
                    Ok(()) => Some(b.into_boxed_slice()),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
                    Err(e) => return Err(tmp_err(e)),
                }
            }
        };
        if let Some(r) = next {
            self.heap.push(Reverse((r, i)));
        }
        Ok(())
    }

    /// The next record in order, or `None` at the end.
    pub fn next_rec(&mut self) -> Result<Option<Box<[u8]>>> {
        let Some(Reverse((r, i))) = self.heap.pop() else {
            return Ok(None);
        };
        self.refill(i)?;
        Ok(Some(r))
    }

    /// The next record without taking it.
    pub fn peek(&self) -> Option<&[u8]> {
        self.heap.peek().map(|Reverse((r, _))| &r[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_across_runs_like_an_in_memory_sort() {
        let mut s = Sorter::new(5);
        s.budget = 10 * (5 + PER_RECORD);
        let mut want = Vec::new();
        let mut x: u64 = 12345;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 24).to_be_bytes()[3..].to_vec();
            s.push(&r).unwrap();
            want.push(r);
        }
        assert!(s.runs() > 50, "the budget must force spills");
        want.sort();
        let mut m = s.finish().unwrap();
        let mut got = Vec::new();
        while let Some(r) = m.next_rec().unwrap() {
            got.push(r.to_vec());
        }
        assert_eq!(got, want);
    }
}
