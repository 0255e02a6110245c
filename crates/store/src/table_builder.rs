//! Builds a sorted table in memory, then seals all its blocks as one batch
//! (one accelerator job later) and returns the file's bytes.
//!
//! Layout: file header, data blocks, filter block, index block, footer.
//! Every block is sealed with its file number, block number, offset and
//! kind; the footer has the fixed block number `FOOTER_BLOCK`.

use crate::block::BlockBuilder;
use crate::bloom;
use crate::codec::{BlockCodec, BlockContext, BlockKind, KeyPin, SealError};
use crate::coding::{put_u32, put_u64};
use crate::format::{user_key, BlockHandle, FileHeader, FileKind, HEADER_LEN};

pub const FOOTER_BLOCK: u32 = u32::MAX;
/// index handle (16) + filter handle (16) + entry count (8).
pub const FOOTER_PAYLOAD_LEN: usize = 40;

pub struct TableOptions {
    pub block_size: usize,
    pub restart_interval: usize,
    pub bloom_bits_per_key: usize,
}

pub struct TableBuilder {
    opts: TableOptions,
    blocks: Vec<Vec<u8>>,
    /// Last key of each finished block: the index's separator.
    last_keys: Vec<Vec<u8>>,
    current: BlockBuilder,
    last_key: Vec<u8>,
    hashes: Vec<u32>,
    entries: u64,
    smallest: Option<Vec<u8>>,
    bytes: usize,
}

/// A finished table: the file's bytes and what the manifest records.
pub struct BuiltTable {
    pub bytes: Vec<u8>,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    /// The data key the table is sealed under; hold it until the table is
    /// in the version.
    pub key: KeyPin,
}

impl TableBuilder {
    pub fn new(opts: TableOptions) -> Self {
        let current = BlockBuilder::new(opts.restart_interval);
        TableBuilder {
            opts,
            blocks: Vec::new(),
            last_keys: Vec::new(),
            current,
            last_key: Vec::new(),
            hashes: Vec::new(),
            entries: 0,
            smallest: None,
            bytes: 0,
        }
    }

    /// Adds an entry; internal keys must arrive in increasing order.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) {
        if self.smallest.is_none() {
            self.smallest = Some(ikey.to_vec());
        }
        let uk = user_key(ikey);
        if self.entries == 0 || user_key(&self.last_key) != uk {
            self.hashes.push(bloom::key_hash(uk));
        }
        self.current.add(ikey, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.entries += 1;
        self.bytes += ikey.len() + value.len();
        if self.current.estimated_size() >= self.opts.block_size {
            self.finish_block();
        }
    }

    fn finish_block(&mut self) {
        if self.current.is_empty() {
            return;
        }
        let b = std::mem::replace(
            &mut self.current,
            BlockBuilder::new(self.opts.restart_interval),
        );
        self.blocks.push(b.finish());
        self.last_keys.push(self.last_key.clone());
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn estimated_size(&self) -> usize {
        self.bytes
    }

    pub fn finish(
        mut self,
        file_number: u64,
        codec: &dyn BlockCodec,
    ) -> Result<BuiltTable, SealError> {
        self.finish_block();
        let key = codec.pin_key();
        let key_id = key.id();
        let overhead = codec.overhead();
        let mut offset = HEADER_LEN as u64;
        let mut batch: Vec<(BlockContext, Vec<u8>)> = Vec::with_capacity(self.blocks.len() + 3);
        let mut push = |batch: &mut Vec<(BlockContext, Vec<u8>)>, kind, block, payload: Vec<u8>| {
            let h = BlockHandle {
                offset,
                len: (payload.len() + overhead) as u32,
                block,
            };
            offset += u64::from(h.len);
            let ctx = BlockContext {
                key_id,
                file_number,
                block_number: block,
                offset: h.offset,
                kind,
            };
            batch.push((ctx, payload));
            h
        };
        let mut index = BlockBuilder::new(1);
        let blocks = std::mem::take(&mut self.blocks);
        let n = blocks.len() as u32;
        for (i, (payload, last)) in blocks.into_iter().zip(&self.last_keys).enumerate() {
            let h = push(&mut batch, BlockKind::Data, i as u32, payload);
            let mut v = Vec::new();
            h.encode_to(&mut v);
            index.add(last, &v);
        }
        let filter = bloom::build_filter(&self.hashes, self.opts.bloom_bits_per_key);
        let filter_h = push(&mut batch, BlockKind::Filter, n, filter);
        let index_h = push(&mut batch, BlockKind::Index, n + 1, index.finish());
        let mut footer = Vec::with_capacity(FOOTER_PAYLOAD_LEN);
        for h in [index_h, filter_h] {
            put_u64(&mut footer, h.offset);
            put_u32(&mut footer, h.len);
            put_u32(&mut footer, h.block);
        }
        put_u64(&mut footer, self.entries);
        push(&mut batch, BlockKind::Footer, FOOTER_BLOCK, footer);

        codec.seal_batch(&mut batch)?;
        let header = FileHeader {
            kind: FileKind::Table,
            key_id,
            file_number,
        };
        let mut bytes = Vec::with_capacity(offset as usize);
        bytes.extend_from_slice(&header.encode());
        for (_, sealed) in &batch {
            bytes.extend_from_slice(sealed);
        }
        debug_assert_eq!(bytes.len() as u64, offset);
        Ok(BuiltTable {
            bytes,
            smallest: self.smallest.unwrap_or_default(),
            largest: self.last_key,
            key,
        })
    }
}
