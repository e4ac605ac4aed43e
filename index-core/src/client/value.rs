//! Byte values (ARCHITECTURE §12): the same leaf-lock protocol, with each leaf entry naming a
//! block of the memory node's value region.
//!
//! A PUT allocates a block locally ([`crate::values`]), then runs the ordinary write: the batch
//! that ends it WRITEs the block and its state byte *first* and the leaves after them (WRITEs land
//! in order, so no leaf names a block before the block is whole), and WRITEs the replaced block's
//! state byte free *after* the leaves (so the block is free only once no leaf names it). Still two
//! round trips. The block goes in the ending batch rather than the lock batch: only under the lock
//! is it known whether the change happens at all (an INSERT of a present key writes nothing), and
//! a write handed a lock by a sibling thread has no lock batch.
//!
//! A GET reads the leaf as for a `u64` value, then the block (two round trips), and checks the
//! block's key, length and checksum against the reference; a mismatch (a block freed and used
//! again under a reader that outlived the retirement epochs) is read again through the leaf.

use std::sync::Arc;

use leaf_store::value::{ValueRef, check_block, encode_block};
use rdma_transport::{Endpoint, Verb};

use crate::IndexError;
use crate::backoff::Backoff;
use crate::stats::OpKind;
use crate::store::NodeCache;
use crate::values::{Block, NodeValues};

use super::op::WriteOp;
use super::value_io::ValueIo;
use super::wait::{self, Waiting};
use super::{Change, Client, ReadRetries};

impl<E: Endpoint> Client<E> {
    /// Arms the value side of a commit: `changes` says whether the outcome changes the key's
    /// entry, `old` is the value word it replaces or deletes.
    pub(super) fn arm_value(
        &self,
        value: &mut ValueIo,
        node: &NodeCache,
        changes: bool,
        old: Option<u64>,
    ) {
        if node.values.is_none() {
            return;
        }
        let free = old
            .filter(|_| changes)
            .and_then(|raw| crate::values::state_of_ref(&node.layout, raw));
        let free_word = match (old, node.tag) {
            (Some(raw), tag) if tag != 0 && changes => Some((
                node.members.free_word_addr(tag, self.connection_index),
                raw.to_le_bytes(),
            )),
            _ => None,
        };
        value.arm(changes, free, free_word);
    }

    /// The node serving `key`, which must store byte values.
    fn value_node(&self, key: u64) -> Result<(usize, Arc<NodeValues>), IndexError> {
        let at = self.caches.node_of(key);
        let node = &self.caches.nodes[at];
        match &node.values {
            Some(values) => Ok((at, Arc::clone(values))),
            None => Err(IndexError::WrongValueKind {
                node: node.info.id,
                stores: "u64",
            }),
        }
    }

    /// Refuses a `u64` operation on a pool with byte values.
    pub(super) fn check_u64_pool(&self, key: u64) -> Result<(), IndexError> {
        let node = &self.caches.nodes[self.caches.node_of(key)];
        match node.values {
            Some(_) => Err(IndexError::WrongValueKind {
                node: node.info.id,
                stores: "byte",
            }),
            None => Ok(()),
        }
    }

    /// The bytes of `key`'s value, if present. Two round trips with a fresh cache.
    pub fn get_value(&mut self, key: u64) -> Result<Option<Vec<u8>>, IndexError> {
        let mut out = Vec::new();
        Ok(self.get_value_into(key, &mut out)?.then_some(out))
    }

    /// Reads `key`'s value into `out` (cleared first, its allocation reused); `Ok(false)` if
    /// the key is absent.
    pub fn get_value_into(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, IndexError> {
        wait::blocking!(self.get_value_with(key, out, Waiting::Blocking))
    }

    /// [`Self::get_value_into`], waiting as `waiting` says.
    pub(crate) async fn get_value_with(
        &mut self,
        key: u64,
        out: &mut Vec<u8>,
        waiting: Waiting,
    ) -> Result<bool, IndexError> {
        self.counted(OpKind::Get, waiting, async |c| {
            c.get_value_inner(key, out).await
        })
        .await
    }

    async fn get_value_inner(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, IndexError> {
        let (_, values) = self.value_node(key)?;
        let mut retries = ReadRetries::new(&self.caches.config);
        loop {
            let Some(raw) = self.get_inner(key).await? else {
                out.clear();
                return Ok(false);
            };
            let value = ValueRef::from_raw(raw);
            out.clear();
            out.resize(value.read_bytes() as usize, 0);
            let mut verbs = [Verb::read(values.region.block_addr(value), out)];
            wait::batches(&mut self.ep, self.waiting, &mut verbs).await?;
            match check_block(out, key, value) {
                Ok(_) => {
                    out.drain(..leaf_store::value::BLOCK_HEADER_BYTES as usize);
                    out.truncate(value.len() as usize);
                    return Ok(true);
                }
                Err(_) => {
                    self.value_retries += 1;
                    retries.again(self.waiting).await?;
                }
            }
        }
    }

    /// Inserts `key` with `value`; `Ok(false)` (and no change) if the key is present.
    pub fn insert_value(&mut self, key: u64, value: &[u8]) -> Result<bool, IndexError> {
        wait::blocking!(self.write_value_with(key, value, Change::Insert, Waiting::Blocking))
    }

    /// Sets the value of a present `key`; `Ok(false)` if absent.
    pub fn update_value(&mut self, key: u64, value: &[u8]) -> Result<bool, IndexError> {
        wait::blocking!(self.write_value_with(key, value, Change::Update, Waiting::Blocking))
    }

    /// Inserts or updates `key`; `Ok(true)` if it was inserted.
    pub fn put_value(&mut self, key: u64, value: &[u8]) -> Result<bool, IndexError> {
        wait::blocking!(self.write_value_with(key, value, Change::Upsert, Waiting::Blocking))
    }

    /// An insert (`Change::Insert`), update or upsert of a byte value, waiting as `waiting`
    /// says.
    pub(crate) async fn write_value_with(
        &mut self,
        key: u64,
        value: &[u8],
        change: fn(u64) -> Change,
        waiting: Waiting,
    ) -> Result<bool, IndexError> {
        let kind = match change(0) {
            Change::Insert(_) => OpKind::Insert,
            Change::Update(_) => OpKind::Update,
            _ => OpKind::Upsert,
        };
        self.counted(kind, waiting, async |c| {
            c.write_value(key, Some(value), change).await
        })
        .await
    }

    /// Up to `n` keys ≥ `start` with their values, in key order (as [`Client::scan`]).
    pub fn scan_values(&mut self, start: u64, n: usize) -> Result<Vec<(u64, Vec<u8>)>, IndexError> {
        wait::blocking!(self.scan_values_with(start, n, Waiting::Blocking))
    }

    /// [`Self::scan_values`], waiting as `waiting` says.
    pub(crate) async fn scan_values_with(
        &mut self,
        start: u64,
        n: usize,
        waiting: Waiting,
    ) -> Result<Vec<(u64, Vec<u8>)>, IndexError> {
        self.counted(OpKind::Scan, waiting, async |c| {
            c.scan_values_inner(start, n).await
        })
        .await
    }

    async fn scan_values_inner(
        &mut self,
        start: u64,
        n: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, IndexError> {
        self.value_node(start)?;
        let rows = self.scan_inner(start, n).await?;
        // SAFETY: used only within this operation, which borrows `self` throughout.
        let caches = unsafe { self.op_caches() };
        let mut blocks: Vec<Vec<u8>> = rows
            .iter()
            .map(|&(_, raw)| vec![0u8; ValueRef::from_raw(raw).read_bytes() as usize])
            .collect();
        {
            let mut verbs: Vec<Verb<'_>> = Vec::with_capacity(rows.len());
            for (&(key, raw), buf) in rows.iter().zip(blocks.iter_mut()) {
                let node = &caches.nodes[caches.node_of(key)];
                let Some(values) = &node.values else {
                    return Err(IndexError::WrongValueKind {
                        node: node.info.id,
                        stores: "u64",
                    });
                };
                verbs.push(Verb::read(
                    values.region.block_addr(ValueRef::from_raw(raw)),
                    buf,
                ));
            }
            wait::batches(&mut self.ep, self.waiting, &mut verbs).await?;
        }
        let mut out = Vec::with_capacity(rows.len());
        for ((key, raw), mut block) in rows.into_iter().zip(blocks) {
            let value = ValueRef::from_raw(raw);
            if check_block(&block, key, value).is_ok() {
                block.drain(..leaf_store::value::BLOCK_HEADER_BYTES as usize);
                block.truncate(value.len() as usize);
                out.push((key, block));
                continue;
            }
            // Freed and used again under this scan: the key's value now, if it is still there.
            self.value_retries += 1;
            let mut now = Vec::new();
            if self.get_value_inner(key, &mut now).await? {
                out.push((key, now));
            }
        }
        Ok(out)
    }

    /// A write of a byte value (`None`: a delete through the byte path is [`Client::delete`]).
    async fn write_value(
        &mut self,
        key: u64,
        value: Option<&[u8]>,
        change: fn(u64) -> Change,
    ) -> Result<bool, IndexError> {
        let (at, values) = self.value_node(key)?;
        let bytes = value.unwrap_or_default();
        let len = bytes.len() as u64;
        let class = values
            .region
            .class_for(len)
            .map_err(|_| IndexError::ValueTooLarge {
                node: self.caches.nodes[at].info.id,
                len,
                limit: values.region.max_value_len(),
            })?;
        let block = self.alloc_block(&values, class).await?;
        let Some(reference) = values.reference(block, len) else {
            values.unused(block);
            return Err(IndexError::ValueTooLarge {
                node: self.caches.nodes[at].info.id,
                len,
                limit: values.region.max_value_len(),
            });
        };
        let mut op = WriteOp::carrying(ValueIo::storing(
            values.region.block_addr(reference),
            encode_block(key, bytes, reference.offset()),
            values.state_addr(block),
        ));
        let result = self.write_in(&mut op, key, change(reference.raw())).await;
        self.settle_block(&values, block, &op.value, result.is_ok());
        self.conclude(op, result)
    }

    /// A block of `class` for this operation. When the region has none free but blocks freed
    /// here wait for the memory node's reuse horizon (or may be found freed by the next scans),
    /// waits for them with backoff up to [`crate::StoreConfig::wait_limit`] — *outside* the
    /// operation's epoch, which would otherwise hold that horizon back itself (nothing has been
    /// read yet that the epoch protects). Then, or at once when nothing could free a block,
    /// [`IndexError::ValuesExhausted`].
    async fn alloc_block(
        &mut self,
        values: &NodeValues,
        class: usize,
    ) -> Result<Block, IndexError> {
        let mut waiting: Option<(Backoff, usize)> = None;
        loop {
            let e = match values.alloc(&mut self.ep, class) {
                Err(e @ IndexError::ValuesExhausted { .. }) => e,
                other => return other,
            };
            let (backoff, since) = waiting.get_or_insert_with(|| {
                (
                    Backoff::new(self.caches.config.wait_limit),
                    values.scanned(class),
                )
            });
            if !values.may_free(class, *since) {
                return Err(e);
            }
            self.active.leave();
            // In posting mode a yield: a sibling operation of this thread may be what holds
            // the reuse horizon back.
            let waited = wait::pause(backoff, self.waiting).await;
            self.op_epoch = self.caches.members.epochs.enter(&self.active);
            if !waited {
                return Err(e);
            }
        }
    }

    fn settle_block(&self, values: &NodeValues, block: Block, io: &ValueIo, ok: bool) {
        if ok && io.linked() {
            values.linked(block);
        } else if io.sent() {
            values.forget(block);
        } else {
            values.unused(block);
        }
    }
}
