//! Iterates one level below 0: its tables are sorted and do not overlap,
//! so they are concatenated, each opened only when the cursor reaches it.

use std::sync::Arc;

use crate::db::DbInner;
use crate::error::Result;
use crate::iterator::InternalIterator;
use crate::table_reader::TableIterator;
use crate::version::FileMeta;

/// Concatenates the non-overlapping tables of one level, opening each only
/// when the cursor reaches it.
pub(crate) struct LevelIterator {
    inner: Arc<DbInner>,
    files: Vec<Arc<FileMeta>>,
    pos: usize,
    current: Option<TableIterator>,
    error: Option<crate::error::Error>,
}

impl LevelIterator {
    pub fn new(inner: Arc<DbInner>, files: Vec<Arc<FileMeta>>) -> Self {
        LevelIterator {
            inner,
            files,
            pos: 0,
            current: None,
            error: None,
        }
    }

    fn open(&mut self, i: usize) -> bool {
        self.pos = i;
        self.current = None;
        if i >= self.files.len() {
            return false;
        }
        match self.inner.tables.get(&self.files[i]) {
            Ok(t) => {
                self.current = Some(TableIterator::new(t));
                true
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    fn cur_valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }

    fn cur_error(&mut self) -> bool {
        if let Some(Err(e)) = self.current.as_ref().map(|c| c.status()) {
            self.error = Some(e);
            self.current = None;
            return true;
        }
        false
    }

    fn skip_forward(&mut self) {
        while !self.cur_valid() && !self.cur_error() && self.current.is_some() {
            if !self.open(self.pos + 1) {
                return;
            }
            self.current.as_mut().expect("opened").seek_to_first();
        }
    }

    fn skip_backward(&mut self) {
        while !self.cur_valid() && !self.cur_error() && self.current.is_some() {
            if self.pos == 0 {
                self.current = None;
                return;
            }
            if !self.open(self.pos - 1) {
                return;
            }
            self.current.as_mut().expect("opened").seek_to_last();
        }
    }
}

impl InternalIterator for LevelIterator {
    fn valid(&self) -> bool {
        self.error.is_none() && self.cur_valid()
    }
    fn seek_to_first(&mut self) {
        if self.open(0) {
            self.current.as_mut().expect("opened").seek_to_first();
            self.skip_forward();
        }
    }
    fn seek_to_last(&mut self) {
        if !self.files.is_empty() && self.open(self.files.len() - 1) {
            self.current.as_mut().expect("opened").seek_to_last();
            self.skip_backward();
        }
    }
    fn seek(&mut self, target: &[u8]) {
        let i = self.files.partition_point(|f| {
            crate::format::compare_internal(&f.largest, target) == std::cmp::Ordering::Less
        });
        if self.open(i) {
            self.current.as_mut().expect("opened").seek(target);
            self.skip_forward();
        }
    }
    fn next(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.next();
            self.skip_forward();
        }
    }
    fn prev(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.prev();
            self.skip_backward();
        }
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().expect("valid iterator").key()
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().expect("valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}
