//! Byte values: a GET READs the leaf, then the block it names; a write WRITEs its block in the
//! batch that takes the leaf's lock and frees the replaced block after the leaf's WRITE (see
//! `crate::value` for when a freed block is used again).

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use leaf_store::value::{CLASS_BYTES, ValueRef, check_block, class_for, encode_block};
use rdma_transport::{Endpoint, Verb};

use super::{Change, Client};
use crate::TreeError;
use crate::wait::{Waiting, block_on};

impl<E: Endpoint> Client<E> {
    /// The byte value of `key`, if present: two round trips with the leaf's parent cached (the
    /// leaf, then the block).
    ///
    /// The block's key, length and checksum are checked, so the bytes returned are never torn
    /// and never another key's. The baseline reuses a freed block after [`crate::REUSE_GRACE`]
    /// rather than after retirement epochs: a reader paused longer than that between its two
    /// READs may return a newer value of the same key.
    pub fn get_value(&mut self, key: u64) -> Result<Option<Vec<u8>>, TreeError> {
        let mut out = Vec::new();
        Ok(self.get_value_into(key, &mut out)?.then_some(out))
    }

    /// Reads the byte value of `key` into `out` (replacing its contents); `Ok(false)` if absent.
    pub fn get_value_into(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, TreeError> {
        block_on(self.get_value_with(key, out, Waiting::Blocking))
    }

    /// [`Client::get_value_into`], waiting as `waiting` says.
    pub(crate) async fn get_value_with(
        &mut self,
        key: u64,
        out: &mut Vec<u8>,
        waiting: Waiting,
    ) -> Result<bool, TreeError> {
        self.waiting = waiting;
        self.expect_values(key, true)?;
        self.read_value(key, out).await
    }

    /// The byte value of `key` into `out`: the leaf, then the block it names.
    async fn read_value(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, TreeError> {
        let shared = Arc::clone(&self.shared);
        let node = shared.node_of(key);
        let layout = shared.nodes[node].layout;
        for attempt in 0..shared.config.max_attempts {
            let Some(raw) = self.leaf_value(node, key).await? else {
                out.clear();
                return Ok(false);
            };
            let value = ValueRef::from_raw(raw);
            out.clear();
            out.resize(value.read_bytes() as usize, 0);
            self.remote_read(layout.block_addr(value), out).await?;
            if let Ok(data) = check_block(out, key, value) {
                let (start, len) = (data.as_ptr() as usize - out.as_ptr() as usize, data.len());
                out.copy_within(start..start + len, 0);
                out.truncate(len);
                return Ok(true);
            }
            // The block was used again since the leaf named it: back to the leaf.
            self.stats.value_retries += 1;
            self.pause(attempt).await;
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Inserts `key` with `value`; `Ok(false)` (and no change) if present.
    pub fn insert_value(&mut self, key: u64, value: &[u8]) -> Result<bool, TreeError> {
        block_on(self.write_value_with(key, value, Change::Insert, Waiting::Blocking))
    }

    /// Sets a present `key`'s value; `Ok(false)` if absent.
    pub fn update_value(&mut self, key: u64, value: &[u8]) -> Result<bool, TreeError> {
        block_on(self.write_value_with(key, value, Change::Update, Waiting::Blocking))
    }

    /// Inserts or updates `key`; `Ok(true)` if it was inserted.
    pub fn put_value(&mut self, key: u64, value: &[u8]) -> Result<bool, TreeError> {
        block_on(self.write_value_with(key, value, Change::Upsert, Waiting::Blocking))
    }

    /// Up to `n` keys ≥ `start` with their byte values, in key order: the leaves as
    /// [`Client::scan`] reads them, then every block in one batch (a block used again since is
    /// read through its leaf again; a key deleted meanwhile is left out).
    pub fn scan_values(&mut self, start: u64, n: usize) -> Result<Vec<(u64, Vec<u8>)>, TreeError> {
        block_on(self.scan_values_with(start, n, Waiting::Blocking))
    }

    /// [`Client::scan_values`], waiting as `waiting` says.
    pub(crate) async fn scan_values_with(
        &mut self,
        start: u64,
        n: usize,
        waiting: Waiting,
    ) -> Result<Vec<(u64, Vec<u8>)>, TreeError> {
        self.waiting = waiting;
        self.expect_values(start, true)?;
        let entries = self.scan_entries(start, n).await?;
        let shared = Arc::clone(&self.shared);
        let refs: Vec<ValueRef> = entries.iter().map(|e| ValueRef::from_raw(e.1)).collect();
        let mut buffers: Vec<Vec<u8>> = refs
            .iter()
            .map(|r| vec![0u8; r.read_bytes() as usize])
            .collect();
        {
            let mut verbs: Vec<Verb<'_>> = entries
                .iter()
                .zip(&refs)
                .zip(buffers.iter_mut())
                .map(|((&(key, _), &r), buf)| {
                    let layout = shared.nodes[shared.node_of(key)].layout;
                    Verb::read(layout.block_addr(r), buf)
                })
                .collect();
            if !verbs.is_empty() {
                self.batches(&mut verbs).await?;
            }
        }
        let mut out = Vec::with_capacity(entries.len());
        for ((&(key, _), r), buf) in entries.iter().zip(refs).zip(buffers) {
            match check_block(&buf, key, r) {
                Ok(data) => out.push((key, data.to_vec())),
                Err(_) => {
                    self.stats.value_retries += 1;
                    self.expect_values(key, true)?;
                    let mut value = Vec::new();
                    if self.read_value(key, &mut value).await? {
                        out.push((key, value));
                    }
                }
            }
        }
        Ok(out)
    }

    /// A byte-value insert, update or upsert (`change` of the block's reference), waiting as
    /// `waiting` says.
    pub(crate) async fn write_value_with(
        &mut self,
        key: u64,
        value: &[u8],
        change: fn(u64) -> Change,
        waiting: Waiting,
    ) -> Result<bool, TreeError> {
        self.waiting = waiting;
        self.expect_values(key, true)?;
        let shared = Arc::clone(&self.shared);
        let node = shared.node_of(key);
        let layout = shared.nodes[node].layout;
        let len = value.len() as u64;
        let limit = layout.max_value_len();
        let class = class_for(len)
            .filter(|_| len <= limit)
            .ok_or(TreeError::ValueTooLarge {
                node: layout.node(),
                len,
                limit,
            })?;
        let offset = self.take_block(node, class).await?;
        let reference = ValueRef::new(offset, len).ok_or(TreeError::ValueTooLarge {
            node: layout.node(),
            len,
            limit,
        })?;
        let mut block = Some((layout.value_addr(offset), encode_block(key, value, offset)));
        let outcome = match self.write(key, change(reference.raw()), &mut block).await {
            Ok(outcome) => outcome,
            Err(e) => {
                // The block is free again only if it never left (a failed commit may have
                // linked it).
                if block.is_some() {
                    self.give_back(node, class, offset, None);
                }
                return Err(e);
            }
        };
        if !outcome.linked {
            self.give_back(node, class, offset, None);
        }
        if let Some(old) = outcome.old {
            self.release_value(key, old);
        }
        Ok(outcome.done)
    }

    /// A block of `class` on `node`: freed, carved, or from a chunk taken now (one FAA).
    async fn take_block(&mut self, node: usize, class: usize) -> Result<u64, TreeError> {
        let shared = Arc::clone(&self.shared);
        let Some(values) = shared.values[node].as_ref() else {
            return Err(TreeError::Config("no value region".into()));
        };
        let now = Instant::now();
        if let Some(at) = values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(class, now)
        {
            return Ok(at);
        }
        let layout = shared.nodes[node].layout;
        let chunk = self.remote_faa(layout.value_chunk_word_addr(), 1).await?;
        if chunk >= layout.value_chunks() {
            self.remote_faa(layout.value_chunk_word_addr(), u64::MAX)
                .await?;
            return Err(TreeError::ValuesExhausted {
                node: layout.node(),
                chunks: layout.value_chunks(),
            });
        }
        let mut values = values.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = layout.value_chunk_bytes;
        values.add_chunk(class, chunk * bytes, bytes - bytes % CLASS_BYTES[class]);
        values.take(class, now).ok_or_else(|| {
            TreeError::Corrupt(format!("a value chunk of {bytes} bytes holds no block"))
        })
    }

    /// Frees the block `old` (a value word a leaf held for `key` until this client's write).
    pub(super) fn release_value(&mut self, key: u64, old: u64) {
        let node = self.shared.node_of(key);
        if !self.shared.nodes[node].layout.has_values() {
            return;
        }
        let old = ValueRef::from_raw(old);
        if let Some(class) = class_for(old.len()) {
            self.give_back(node, class, old.offset(), Some(Instant::now()));
        }
    }

    fn give_back(&self, node: usize, class: usize, offset: u64, freed: Option<Instant>) {
        if let Some(values) = self.shared.values[node].as_ref() {
            values
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .free(class, offset, freed);
        }
    }
}
