//! Reads a sorted table: checks header and footer at open, keeps the index
//! and filter in memory, loads data blocks through the block cache.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::block::{Block, BlockIterator};
use crate::bloom;
use crate::cache::BlockCache;
use crate::codec::{BlockCodec, BlockContext, BlockKind};
use crate::coding::Decoder;
use crate::env::{FileSystem, RandomAccessFile};
use crate::error::{Error, IoContext, Result};
use crate::format::{compare_internal, BlockHandle, FileKind, HEADER_LEN};
use crate::iterator::InternalIterator;
use crate::log_reader::check_header;
use crate::table_builder::{FOOTER_BLOCK, FOOTER_PAYLOAD_LEN};

pub struct Table {
    number: u64,
    /// The data key the header names.
    key_id: u32,
    path: PathBuf,
    file: Arc<dyn RandomAccessFile>,
    codec: Arc<dyn BlockCodec>,
    cache: Arc<BlockCache>,
    index: Arc<Block>,
    handles: Vec<BlockHandle>,
    filter: Vec<u8>,
    /// Filter, index and footer handles, for [`Table::layout`].
    meta_handles: [BlockHandle; 3],
    entries: u64,
}

pub(crate) fn location(h: &BlockHandle) -> String {
    if h.block == FOOTER_BLOCK {
        format!("footer at offset {}", h.offset)
    } else {
        format!("block {} at offset {}", h.block, h.offset)
    }
}

impl Table {
    /// Opens table `number`, whose size the manifest recorded as `size`.
    pub fn open(
        fs: &dyn FileSystem,
        path: &Path,
        number: u64,
        size: u64,
        codec: Arc<dyn BlockCodec>,
        cache: Arc<BlockCache>,
    ) -> Result<Table> {
        let file = fs
            .open_read(path)
            .ctx(|| format!("opening table {}", path.display()))?;
        let actual = file
            .len()
            .ctx(|| format!("reading size of {}", path.display()))?;
        if actual != size {
            return Err(Error::corruption(
                path,
                format!("file size {actual}"),
                format!("table should be {size} bytes (truncated or overwritten)"),
            ));
        }
        let key_id = check_header(&*file, path, FileKind::Table, number, &*codec)?;
        let footer_len = (FOOTER_PAYLOAD_LEN + codec.overhead()) as u64;
        if size < HEADER_LEN as u64 + footer_len {
            return Err(Error::corruption(
                path,
                "footer",
                "file too short for a footer",
            ));
        }
        let mut t = Table {
            number,
            key_id,
            path: path.to_owned(),
            file,
            codec,
            cache,
            index: Arc::new(Block::decode(vec![0, 0, 0, 0, 1, 0, 0, 0]).expect("empty block")),
            handles: Vec::new(),
            filter: Vec::new(),
            meta_handles: [BlockHandle {
                offset: 0,
                len: 0,
                block: 0,
            }; 3],
            entries: 0,
        };
        let footer_h = BlockHandle {
            offset: size - footer_len,
            len: footer_len as u32,
            block: FOOTER_BLOCK,
        };
        let footer = t.read_block(footer_h, BlockKind::Footer)?;
        let mut d = Decoder::new(&footer);
        let handle = |d: &mut Decoder<'_>| -> Option<BlockHandle> {
            Some(BlockHandle {
                offset: d.u64()?,
                len: d.u32()?,
                block: d.u32()?,
            })
        };
        let bad_footer = || Error::corruption(path, location(&footer_h), "malformed footer");
        let index_h = handle(&mut d).ok_or_else(bad_footer)?;
        let filter_h = handle(&mut d).ok_or_else(bad_footer)?;
        t.entries = d.u64().ok_or_else(bad_footer)?;
        let data_end = footer_h.offset;
        for h in [index_h, filter_h] {
            if h.offset < HEADER_LEN as u64 || h.offset.saturating_add(u64::from(h.len)) > data_end
            {
                return Err(Error::corruption(
                    path,
                    location(&footer_h),
                    format!("footer names a block outside the file ({})", location(&h)),
                ));
            }
        }
        t.filter = t.read_block(filter_h, BlockKind::Filter)?;
        let index = t.read_block(index_h, BlockKind::Index)?;
        let index =
            Block::decode(index).map_err(|r| Error::corruption(path, location(&index_h), r))?;
        let mut handles = Vec::with_capacity(index.len());
        for i in 0..index.len() {
            let mut d = Decoder::new(index.value(i));
            let h = BlockHandle::decode_from(&mut d)
                .filter(|h| {
                    h.block == i as u32
                        && h.offset >= HEADER_LEN as u64
                        && h.offset.saturating_add(u64::from(h.len)) <= filter_h.offset
                })
                .ok_or_else(|| {
                    Error::corruption(
                        path,
                        location(&index_h),
                        format!("bad handle for data block {i}"),
                    )
                })?;
            handles.push(h);
        }
        t.index = Arc::new(index);
        t.handles = handles;
        t.meta_handles = [filter_h, index_h, footer_h];
        Ok(t)
    }

    /// Every block of the file with its kind, in file order (data blocks,
    /// filter, index, footer), as the index and footer name them.
    pub fn layout(&self) -> Vec<(BlockHandle, BlockKind)> {
        let [filter, index, footer] = self.meta_handles;
        let mut out: Vec<(BlockHandle, BlockKind)> =
            self.handles.iter().map(|h| (*h, BlockKind::Data)).collect();
        out.push((filter, BlockKind::Filter));
        out.push((index, BlockKind::Index));
        out.push((footer, BlockKind::Footer));
        out
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_block(&self, h: BlockHandle, kind: BlockKind) -> Result<Vec<u8>> {
        let mut sealed = vec![0u8; h.len as usize];
        self.file
            .read_exact_at(&mut sealed, h.offset)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    Error::corruption(
                        &self.path,
                        location(&h),
                        "block runs past the end of the file",
                    )
                } else {
                    Error::io(
                        format!("reading {} ({})", self.path.display(), location(&h)),
                        e,
                    )
                }
            })?;
        let ctx = BlockContext {
            key_id: self.key_id,
            file_number: self.number,
            block_number: h.block,
            offset: h.offset,
            kind,
        };
        self.codec
            .open(&ctx, sealed)
            .map_err(|e| Error::corruption(&self.path, location(&h), e.0))
    }

    /// How many data blocks the index names.
    pub fn data_blocks(&self) -> usize {
        self.handles.len()
    }

    /// The last internal key of data block `i`, as the index records it.
    pub fn last_key_of_block(&self, i: usize) -> &[u8] {
        self.index.key(i)
    }

    /// Data block `i`, from the cache or the file.
    pub fn data_block(&self, i: usize) -> Result<Arc<Block>> {
        let h = self.handles[i];
        if let Some(b) = self.cache.get(self.number, h.offset) {
            return Ok(b);
        }
        let raw = self.read_block(h, BlockKind::Data)?;
        let block = Arc::new(
            Block::decode(raw).map_err(|r| Error::corruption(&self.path, location(&h), r))?,
        );
        self.cache.insert(self.number, h.offset, block.clone());
        Ok(block)
    }

    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        bloom::may_contain(&self.filter, user_key)
    }

    /// The first entry with internal key >= `seek`, if any: its block and
    /// its index there (borrowed, not copied: a get copies only the value).
    pub fn seek_entry(&self, seek: &[u8]) -> Result<Option<(Arc<Block>, usize)>> {
        let i = self.index.seek(seek);
        if i >= self.handles.len() {
            return Ok(None);
        }
        let block = self.data_block(i)?;
        let j = block.seek(seek);
        if j < block.len() {
            return Ok(Some((block, j)));
        }
        // The index key is the block's last key, so the entry exists unless
        // the block disagrees with the index.
        Err(Error::corruption(
            &self.path,
            location(&self.handles[i]),
            "index key is larger than every key in its block",
        ))
    }

    /// Reads and checks every block; returns (blocks, entries) seen.
    pub fn verify(&self) -> Result<(u64, u64)> {
        let mut entries = 0u64;
        let mut last: Option<Vec<u8>> = None;
        for i in 0..self.handles.len() {
            let h = self.handles[i];
            let raw = self.read_block(h, BlockKind::Data)?;
            let b =
                Block::decode(raw).map_err(|r| Error::corruption(&self.path, location(&h), r))?;
            if !b.is_sorted() || b.is_empty() {
                return Err(Error::corruption(
                    &self.path,
                    location(&h),
                    "keys out of order",
                ));
            }
            if let Some(l) = &last {
                if compare_internal(l, b.key(0)) != Ordering::Less {
                    return Err(Error::corruption(
                        &self.path,
                        location(&h),
                        "keys out of order across blocks",
                    ));
                }
            }
            if b.key(b.len() - 1) != self.index.key(i) {
                return Err(Error::corruption(
                    &self.path,
                    location(&h),
                    "last key differs from the index",
                ));
            }
            last = Some(b.key(b.len() - 1).to_vec());
            entries += b.len() as u64;
        }
        if entries != self.entries {
            return Err(Error::corruption(
                &self.path,
                "footer",
                format!(
                    "footer counts {} entries, blocks hold {entries}",
                    self.entries
                ),
            ));
        }
        Ok((self.handles.len() as u64 + 3, entries))
    }
}

/// Two-level iterator: index position plus an iterator over that block.
pub struct TableIterator {
    table: Arc<Table>,
    index_pos: usize,
    data: Option<BlockIterator>,
    error: Option<Error>,
}

impl TableIterator {
    pub fn new(table: Arc<Table>) -> Self {
        TableIterator {
            table,
            index_pos: 0,
            data: None,
            error: None,
        }
    }

    fn load(&mut self, i: usize) -> bool {
        self.index_pos = i;
        match self.table.data_block(i) {
            Ok(b) => {
                self.data = Some(BlockIterator::new(b));
                true
            }
            Err(e) => {
                self.error = Some(e);
                self.data = None;
                false
            }
        }
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn skip_forward(&mut self) {
        while !self.data_valid() && self.data.is_some() {
            let next = self.index_pos + 1;
            if next >= self.table.handles.len() {
                self.data = None;
                return;
            }
            if !self.load(next) {
                return;
            }
            self.data.as_mut().expect("loaded").seek_to_first();
        }
    }

    fn skip_backward(&mut self) {
        while !self.data_valid() && self.data.is_some() {
            if self.index_pos == 0 {
                self.data = None;
                return;
            }
            if !self.load(self.index_pos - 1) {
                return;
            }
            self.data.as_mut().expect("loaded").seek_to_last();
        }
    }
}

impl InternalIterator for TableIterator {
    fn valid(&self) -> bool {
        self.error.is_none() && self.data_valid()
    }
    fn seek_to_first(&mut self) {
        self.data = None;
        if !self.table.handles.is_empty() && self.load(0) {
            self.data.as_mut().expect("loaded").seek_to_first();
            self.skip_forward();
        }
    }
    fn seek_to_last(&mut self) {
        self.data = None;
        let n = self.table.handles.len();
        if n > 0 && self.load(n - 1) {
            self.data.as_mut().expect("loaded").seek_to_last();
            self.skip_backward();
        }
    }
    fn seek(&mut self, target: &[u8]) {
        self.data = None;
        let i = self.table.index.seek(target);
        if i < self.table.handles.len() && self.load(i) {
            self.data.as_mut().expect("loaded").seek(target);
            self.skip_forward();
        }
    }
    fn next(&mut self) {
        if let Some(d) = self.data.as_mut() {
            d.next();
            self.skip_forward();
        }
    }
    fn prev(&mut self) {
        if let Some(d) = self.data.as_mut() {
            d.prev();
            self.skip_backward();
        }
    }
    fn key(&self) -> &[u8] {
        self.data.as_ref().expect("valid iterator").key()
    }
    fn value(&self) -> &[u8] {
        self.data.as_ref().expect("valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}
