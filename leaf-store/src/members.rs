//! The membership table: which compute nodes a memory node serves, their leases, and the
//! connections to cut off when one of them is declared dead.
//!
//! A compute node *joins* a memory node by taking a free entry of this table (one READ, one CAS);
//! the entry's index is its **member tag** on that memory node (1..=[`MEMBER_TAGS`]), which its
//! leaf locks carry (see [`crate::LeafTableEntry::owner`]). It registers the connection id of
//! every endpoint it uses there, and renews its lease with one CAS every few milliseconds. The
//! memory node's CPU declares a member dead when its heartbeat has not moved for the lease time,
//! cuts its connections off (fencing), releases its locks (roll-forward recovery), and frees the
//! entry; the next compute node to take it gets a new incarnation, so an old holder's renewal can
//! never succeed again.
//!
//! ```text
//! region (MEMBERS_BYTES):
//!   word 0                 the retirement epoch (written by the memory node only)
//!   words 1..=127          lease word of tag t at word t
//!   then per tag t=1..127   CONNECTIONS_PER_MEMBER words: connection ids (0 = none), index 0 the
//!                           compute node's own (renewing) endpoint, 1.. its clients
//!   then per tag t=1..127   CONNECTIONS_PER_MEMBER × LEAF_BOX words: each client's leaf box —
//!                           leaves the memory node granted it (0 = empty slot)
//!   then per tag t=1..127   CONNECTIONS_PER_MEMBER words: each client's unlink word — the leaf
//!                           its latest unlinking delete took out of a chain
//!   then 128 words          tag t's announced epoch at word t: every view it may still use was
//!                           checked against the slot table after the epoch word showed this
//!                           value (see `Retrainer::reclaim`); word 0: the retrainer's last
//!                           put-off (`crate::put_off`)
//!   then per tag t=1..127   CONNECTIONS_PER_MEMBER words: each client's value free word (v5) —
//!                           the value block (`crate::value::ValueRef`) its write is replacing,
//!                           set before the leaf WRITE and cleared after the block's free
//!
//! lease word:
//!  63  62 61                              32 31                                     0
//! +------+----------------------------------+----------------------------------------+
//! |state |         incarnation (30)         |             heartbeat (32)             |
//! +------+----------------------------------+----------------------------------------+
//!   state: 0 free, 1 alive, 2 dead (fenced; its locks being recovered)
//! ```
//!
//! **Leaf boxes.** The memory node keeps every registered client's box filled with free leaves
//! (CAS 0 → leaf); a client's split takes the new leaf from its box and, in the batch that links
//! it, clears the box slot (CAS leaf → 0) after the link, before the unlock. Box and unlink words
//! hold a leaf as [`leaf_word`] (its number plus one: leaf 0 is a leaf like any other). So every leaf a compute node holds
//! unlinked is named in its box: when it dies, recovery returns the box leaves that no chain links
//! to the free list. Boxes belong to the tag, not the incarnation: a clean leave leaves them
//! filled for the next member with the tag. An unlinking delete writes the leaf it unlinks to
//! the client's unlink word first in its batch and clears it after the freed mark, before the
//! unlock: a non-zero unlink word always names a leaf under its client's lock. If the node dies
//! before the batch marks the SLT slot freed, recovery finds the leaf there (linked nowhere, held
//! by nobody) and frees it.
//!
//! **Revoking a connection** (a live member's own recovery). A connection word with [`REVOKE`]
//! set names a connection its member asked the memory node to fence: an operation through it
//! failed holding a leaf lock, and on a real NIC what the failed batch posted may still land. The
//! memory node fences it and clears the word (CAS to 0); once the word reads 0, nothing of that
//! connection takes effect any more, and the member repairs and releases the lock itself (the
//! same repair as recovery's, [`crate::repair`]) — without being declared dead.
//!
//! Why a registered connection is always fenced: a compute node registers an endpoint by a CAS of
//! its id over the word's old value and a READ of the lease word behind it in one batch (the READ
//! observes memory after the CAS), and uses the endpoint only if the lease is still alive with its
//! incarnation. The memory node marks the lease dead by CAS *before* it reads the connection ids.
//! So either the registration's READ came first — and the CAS, before it, is seen by the memory
//! node's READ — or the READ saw the lease dead and the endpoint is never used. (A CAS, not a
//! WRITE: a NIC's atomic is not atomic with a WRITE, and the memory node clears the row with
//! atomics and one WRITE; see `docs/nic-atomicity.md`.)

use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::{Layout, LeafStoreError, le_word};

/// Set on a connection word whose member asks the memory node to fence that connection (the
/// rest of the word is the connection id; ids never reach bit 63).
pub const REVOKE: u64 = 1 << 63;

/// Member tags are 1..=126 (the LT entry's 7-bit owner field; 0 = no owner, 127 = a retrainer's
/// freeze, [`crate::FREEZE_OWNER`]). Loom builds keep a tiny table: every word of a loom pool is a
/// model-checked atomic.
pub const MEMBER_TAGS: u8 = if cfg!(loom) { 3 } else { 126 };
/// Rows the table has room for: one more than there are member tags (layout v3 gave tag 127 a
/// row before the freeze took that tag; the row stays, unused, so the layout is unchanged).
const TAG_ROWS: u8 = if cfg!(loom) { 3 } else { 127 };
/// Connection-id words per member: the compute node's own endpoint plus up to 127 clients.
pub const CONNECTIONS_PER_MEMBER: u64 = if cfg!(loom) { 4 } else { 128 };
/// Leaves in one client's leaf box.
pub const LEAF_BOX: u64 = if cfg!(loom) { 2 } else { 4 };
/// Lease words at the start of the region (tag t's at word t; word 0 unused).
const LEASE_WORDS: u64 = TAG_ROWS as u64 + 1;
/// Words of one member's connection ids.
const CONNECTION_WORDS: u64 = CONNECTIONS_PER_MEMBER;
/// Words of one member's leaf boxes.
const BOX_WORDS: u64 = CONNECTIONS_PER_MEMBER * LEAF_BOX;
/// Words of one member's unlink words.
const UNLINK_WORDS: u64 = CONNECTIONS_PER_MEMBER;
/// Words of one member's value free words.
const FREE_WORDS: u64 = CONNECTIONS_PER_MEMBER;
/// Bytes of the membership region.
pub const MEMBERS_BYTES: u64 = 8
    * (2 * LEASE_WORDS
        + (TAG_ROWS as u64) * (CONNECTION_WORDS + BOX_WORDS + UNLINK_WORDS + FREE_WORDS));

const STATE_SHIFT: u32 = 62;
const INCARNATION_SHIFT: u32 = 32;
const INCARNATION_MASK: u64 = (1 << 30) - 1;
const HEARTBEAT_MASK: u64 = (1 << 32) - 1;

/// The state of a membership entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Nobody holds the entry; a joining compute node may take it.
    Free,
    /// Held by a live compute node, which renews the heartbeat.
    Alive,
    /// Declared dead by the memory node: fenced, its locks being recovered; freed afterwards.
    Dead,
}

/// One lease word (see the module diagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lease(u64);

impl Lease {
    /// The lease from its raw word.
    pub const fn from_raw(word: u64) -> Self {
        Self(word)
    }

    /// The raw word, as stored remotely.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The entry's state (the unused fourth state reads as dead: nobody may take it).
    pub const fn state(self) -> MemberState {
        match self.0 >> STATE_SHIFT {
            0 => MemberState::Free,
            1 => MemberState::Alive,
            _ => MemberState::Dead,
        }
    }

    /// How many times the entry has been taken (wraps after 2^30 joins of one entry).
    pub const fn incarnation(self) -> u64 {
        (self.0 >> INCARNATION_SHIFT) & INCARNATION_MASK
    }

    /// The heartbeat counter, advanced by every renewal.
    pub const fn heartbeat(self) -> u64 {
        self.0 & HEARTBEAT_MASK
    }

    const fn with(state: u64, incarnation: u64, heartbeat: u64) -> Self {
        Self(
            (state << STATE_SHIFT)
                | ((incarnation & INCARNATION_MASK) << INCARNATION_SHIFT)
                | (heartbeat & HEARTBEAT_MASK),
        )
    }

    /// What a joining compute node CASes a free entry to: alive, next incarnation, heartbeat 0.
    pub const fn joined(self) -> Self {
        Self::with(1, self.incarnation() + 1, 0)
    }

    /// The same lease renewed once (heartbeat + 1, wrapping).
    pub const fn renewed(self) -> Self {
        Self::with(1, self.incarnation(), self.heartbeat() + 1)
    }

    /// The lease declared dead (same incarnation).
    pub const fn dead(self) -> Self {
        Self::with(2, self.incarnation(), self.heartbeat())
    }

    /// The entry freed after recovery (same incarnation: the next join counts up from it).
    pub const fn freed(self) -> Self {
        Self::with(0, self.incarnation(), 0)
    }

    /// Whether `self` is the same holding as `other`: same state and incarnation (heartbeats
    /// may differ).
    pub const fn same_holding(self, other: Self) -> bool {
        self.0 >> INCARNATION_SHIFT == other.0 >> INCARNATION_SHIFT
    }
}

/// The word a leaf box or unlink word holds for `leaf` (0 means none).
pub const fn leaf_word(leaf: u64) -> u64 {
    leaf + 1
}

/// The leaf a leaf box or unlink word names, if any.
pub const fn word_leaf(word: u64) -> Option<u64> {
    word.checked_sub(1)
}

/// Where the membership table of a pool lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberTable {
    layout: Layout,
}

/// A compute node's membership on one memory node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    /// The member tag (1..=127): the owner its leaf locks carry.
    pub tag: u8,
    /// The lease as this member last wrote it.
    pub lease: Lease,
}

/// Why joining or registering failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// Every entry of the table is held.
    #[error("memory node {node}: all {MEMBER_TAGS} membership entries are held")]
    TableFull {
        /// The memory node.
        node: u16,
    },
    /// The member's lease is no longer its own: the memory node declared it dead (and cut its
    /// connections off). The compute node must join again, as a new member.
    #[error("memory node {node}: member {tag} was declared dead and fenced; join again")]
    Fenced {
        /// The memory node.
        node: u16,
        /// The tag that was lost.
        tag: u8,
    },
    /// A connection index beyond [`CONNECTIONS_PER_MEMBER`].
    #[error("at most {CONNECTIONS_PER_MEMBER} connections per member")]
    TooManyConnections,
    /// The transport failed.
    #[error(transparent)]
    Store(#[from] LeafStoreError),
}

impl From<rdma_transport::TransportError> for MembershipError {
    fn from(e: rdma_transport::TransportError) -> Self {
        Self::Store(e.into())
    }
}

impl MemberTable {
    /// The table of the pool laid out by `layout`.
    pub fn new(layout: &Layout) -> Self {
        Self { layout: *layout }
    }

    /// The memory node.
    pub fn node(&self) -> u16 {
        self.layout.node()
    }

    /// The pool's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Address of tag `tag`'s lease word.
    pub fn lease_addr(&self, tag: u8) -> RemoteAddr {
        self.layout
            .at(self.layout.superblock().members_offset + 8 * u64::from(tag))
    }

    /// Address of the first lease word (tag 0's, unused): READ `MEMBER_TAGS + 1` words here for
    /// every lease.
    pub fn leases_addr(&self) -> RemoteAddr {
        self.lease_addr(0)
    }

    /// Address of connection word `index` of tag `tag`.
    pub fn connection_addr(&self, tag: u8, index: u64) -> RemoteAddr {
        let tag = u64::from(tag.max(1)) - 1;
        self.layout.at(self.layout.superblock().members_offset
            + 8 * LEASE_WORDS
            + 8 * (tag * CONNECTIONS_PER_MEMBER + index))
    }

    /// Address of slot `slot` of client `index`'s leaf box of tag `tag`.
    pub fn box_addr(&self, tag: u8, index: u64, slot: u64) -> RemoteAddr {
        let tag = u64::from(tag.max(1)) - 1;
        self.layout.at(self.layout.superblock().members_offset
            + 8 * (LEASE_WORDS + u64::from(TAG_ROWS) * CONNECTION_WORDS)
            + 8 * (tag * BOX_WORDS + index * LEAF_BOX + slot))
    }

    /// Address of the retirement epoch word (lease word 0, which no tag uses).
    pub fn epoch_addr(&self) -> RemoteAddr {
        self.lease_addr(0)
    }

    /// Address of tag `tag`'s announced epoch.
    pub fn announce_addr(&self, tag: u8) -> RemoteAddr {
        self.layout.at(self.layout.superblock().members_offset
            + 8 * (LEASE_WORDS
                + u64::from(TAG_ROWS) * (CONNECTION_WORDS + BOX_WORDS + UNLINK_WORDS))
            + 8 * u64::from(tag))
    }

    /// Address of the retrainer's last put-off word ([`crate::put_off`]).
    pub fn problem_addr(&self) -> RemoteAddr {
        self.announce_addr(0)
    }

    /// Every tag's announced epoch, indexed by tag (index 0 unused), with one READ.
    pub fn read_announcements<E: Endpoint>(&self, ep: &mut E) -> Result<Vec<u64>, LeafStoreError> {
        read_words(ep, self.announce_addr(0), LEASE_WORDS)
    }

    /// Renews `member`'s lease with one CAS and READs the retirement epoch behind it, in one
    /// batch; returns the epoch, and `member.lease` is the renewed lease.
    /// [`MembershipError::Fenced`] if the lease is no longer this member's.
    pub fn renew<E: Endpoint>(
        &self,
        ep: &mut E,
        member: &mut Membership,
    ) -> Result<u64, MembershipError> {
        let renewed = member.lease.renewed();
        let mut epoch = [0u8; 8];
        let mut verbs = [
            Verb::cas(
                self.lease_addr(member.tag),
                member.lease.raw(),
                renewed.raw(),
            ),
            Verb::read(self.epoch_addr(), &mut epoch),
        ];
        ep.batch(&mut verbs)?;
        let old = verbs[0].old_value().unwrap_or(!member.lease.raw());
        if old != member.lease.raw() {
            return Err(MembershipError::Fenced {
                node: self.layout.node(),
                tag: member.tag,
            });
        }
        member.lease = renewed;
        Ok(u64::from_le_bytes(epoch))
    }

    /// Address of client `index`'s unlink word of tag `tag`.
    pub fn unlink_addr(&self, tag: u8, index: u64) -> RemoteAddr {
        let tag = u64::from(tag.max(1)) - 1;
        self.layout.at(self.layout.superblock().members_offset
            + 8 * (LEASE_WORDS + u64::from(TAG_ROWS) * (CONNECTION_WORDS + BOX_WORDS))
            + 8 * (tag * UNLINK_WORDS + index))
    }

    /// Address of client `index`'s value free word of member `tag` (see the module diagram).
    pub fn free_word_addr(&self, tag: u8, index: u64) -> RemoteAddr {
        let tag = u64::from(tag.max(1)) - 1;
        self.layout.at(self.layout.superblock().members_offset
            + 8 * (2 * LEASE_WORDS
                + u64::from(TAG_ROWS) * (CONNECTION_WORDS + BOX_WORDS + UNLINK_WORDS))
            + 8 * (tag * FREE_WORDS + index))
    }

    /// Every value free word of `tag`, by client index (0 = none), with one READ.
    pub fn read_free_words<E: Endpoint>(
        &self,
        ep: &mut E,
        tag: u8,
    ) -> Result<Vec<u64>, LeafStoreError> {
        read_words(ep, self.free_word_addr(tag, 0), FREE_WORDS)
    }

    /// Every unlink word of `tag`, by client index (0 = none), with one READ.
    pub fn read_unlink_words<E: Endpoint>(
        &self,
        ep: &mut E,
        tag: u8,
    ) -> Result<Vec<u64>, LeafStoreError> {
        read_words(ep, self.unlink_addr(tag, 0), UNLINK_WORDS)
    }

    /// Every leaf box of `tag` (client index × [`LEAF_BOX`] words), with one READ.
    pub fn read_boxes<E: Endpoint>(&self, ep: &mut E, tag: u8) -> Result<Vec<u64>, LeafStoreError> {
        read_words(ep, self.box_addr(tag, 0, 0), BOX_WORDS)
    }

    /// Every connection word of `tag`, by client index (0 = none), with one READ.
    pub fn read_connection_words<E: Endpoint>(
        &self,
        ep: &mut E,
        tag: u8,
    ) -> Result<Vec<u64>, LeafStoreError> {
        read_words(ep, self.connection_addr(tag, 0), CONNECTION_WORDS)
    }

    /// Every lease, indexed by tag (index 0 unused), with one READ.
    pub fn read_leases<E: Endpoint>(&self, ep: &mut E) -> Result<Vec<Lease>, LeafStoreError> {
        Ok(read_words(ep, self.leases_addr(), LEASE_WORDS)?
            .into_iter()
            .map(Lease)
            .collect())
    }

    /// Every registered connection id of `tag` (zeros left out; revoked ones without their
    /// [`REVOKE`] bit), with one READ.
    pub fn read_connections<E: Endpoint>(
        &self,
        ep: &mut E,
        tag: u8,
    ) -> Result<Vec<u64>, LeafStoreError> {
        let mut words = self.read_connection_words(ep, tag)?;
        words.retain(|&c| c != 0);
        Ok(words.into_iter().map(|c| c & !REVOKE).collect())
    }

    /// Asks the memory node to fence `member`'s connection `index`, registered as `connection`:
    /// sets [`REVOKE`] on its word by CAS (again and again until the memory node has cleared
    /// it). Whether the connection is done with: the word is cleared (fenced), or holds neither
    /// the id nor its revocation (nothing of this connection to wait for) — `false` while the
    /// revocation waits for the memory node.
    pub fn revoke<E: Endpoint>(
        &self,
        ep: &mut E,
        member: Membership,
        index: u64,
        connection: u64,
    ) -> Result<bool, LeafStoreError> {
        if index >= CONNECTIONS_PER_MEMBER {
            return Ok(true);
        }
        let old = ep.cas(
            self.connection_addr(member.tag, index),
            connection,
            connection | REVOKE,
        )?;
        Ok(old != connection && old != connection | REVOKE)
    }

    /// Joins: takes, by CAS, the free entry taken the fewest times (its incarnation; the lowest
    /// tag among equals), so a tag just freed is reused last — one READ, then one CAS per try.
    pub fn join<E: Endpoint>(&self, ep: &mut E) -> Result<Membership, MembershipError> {
        for _ in 0..64 {
            let leases = self.read_leases(ep)?;
            let Some(tag) = (1..=MEMBER_TAGS)
                .filter(|&t| leases[t as usize].state() == MemberState::Free)
                .min_by_key(|&t| (leases[t as usize].incarnation(), t))
            else {
                return Err(MembershipError::TableFull {
                    node: self.layout.node(),
                });
            };
            let free = leases[tag as usize];
            let joined = free.joined();
            if ep.cas(self.lease_addr(tag), free.raw(), joined.raw())? == free.raw() {
                return Ok(Membership { tag, lease: joined });
            }
        }
        Err(MembershipError::TableFull {
            node: self.layout.node(),
        })
    }

    /// Registers connection `connection` as `member`'s connection `index` in place of
    /// `previous` (0 for a new client; its old connection on a reconnect), and confirms in the
    /// same batch that the membership still holds. After `Ok`, a memory node that declares
    /// `member` dead will fence this connection.
    ///
    /// By CAS, never a plain WRITE: a compute node that slept through its own death and wakes up
    /// could otherwise overwrite the id a new member with its tag registered there, and that
    /// member's connection would escape its own fence. Such a sleeper's CAS can only fill an
    /// empty word (its old ids are nowhere any more), which the new member overwrites when it
    /// registers that index — it owns the word, so whatever is there is replaced.
    pub fn register<E: Endpoint>(
        &self,
        ep: &mut E,
        member: Membership,
        index: u64,
        connection: u64,
        previous: u64,
    ) -> Result<(), MembershipError> {
        if index >= CONNECTIONS_PER_MEMBER {
            return Err(MembershipError::TooManyConnections);
        }
        let at = self.connection_addr(member.tag, index);
        let mut expected = previous;
        for _ in 0..8 {
            let mut lease = [0u8; 8];
            let mut verbs = [
                Verb::cas(at, expected, connection),
                // Fenced: it must observe memory after the CAS.
                Verb::read(self.lease_addr(member.tag), &mut lease).fenced(),
            ];
            ep.batch(&mut verbs)?;
            let old = verbs[0].old_value().unwrap_or(expected);
            if !Lease(u64::from_le_bytes(lease)).same_holding(member.lease) {
                return Err(MembershipError::Fenced {
                    node: self.layout.node(),
                    tag: member.tag,
                });
            }
            if old == expected {
                return Ok(());
            }
            // Left over by an earlier client of this index (or a sleeper, whose CAS may also land
            // over a recovery's zeroing WRITE of the row on a NIC, whose atomics are not atomic
            // with WRITEs: docs/nic-atomicity.md): ours to replace.
            expected = old;
        }
        Err(MembershipError::Store(LeafStoreError::InvalidConfig(
            format!(
                "connection word {index} of member {} keeps changing",
                member.tag
            ),
        )))
    }

    /// Clears `member`'s connection `index` if it still holds `connection` (a client going away).
    pub fn unregister<E: Endpoint>(
        &self,
        ep: &mut E,
        member: Membership,
        index: u64,
        connection: u64,
    ) -> Result<(), LeafStoreError> {
        if index < CONNECTIONS_PER_MEMBER {
            ep.cas(self.connection_addr(member.tag, index), connection, 0)?;
        }
        Ok(())
    }

    /// Leaves: frees the entry if it is still `member`'s (a clean shutdown; nothing is held).
    pub fn leave<E: Endpoint>(&self, ep: &mut E, member: Membership) -> Result<(), LeafStoreError> {
        ep.cas(
            self.lease_addr(member.tag),
            member.lease.raw(),
            member.lease.freed().raw(),
        )?;
        Ok(())
    }
}

/// `n` words from `at`, with one READ.
fn read_words<E: Endpoint>(ep: &mut E, at: RemoteAddr, n: u64) -> Result<Vec<u64>, LeafStoreError> {
    let mut bytes = vec![0u8; 8 * n as usize];
    ep.read(at, &mut bytes)?;
    Ok((0..n as usize).map(|i| le_word(&bytes, i)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_words_move_through_their_states() {
        let free = Lease::default();
        assert_eq!(free.state(), MemberState::Free);
        let joined = free.joined();
        assert_eq!(
            (joined.state(), joined.incarnation(), joined.heartbeat()),
            (MemberState::Alive, 1, 0)
        );
        let renewed = joined.renewed().renewed();
        assert_eq!(renewed.heartbeat(), 2);
        assert!(renewed.same_holding(joined));
        let dead = renewed.dead();
        assert_eq!(dead.state(), MemberState::Dead);
        assert!(!dead.same_holding(joined));
        let again = dead.freed().joined();
        assert_eq!(again.incarnation(), 2);
        assert!(!again.same_holding(joined));
        assert_eq!(joined.raw(), 1 << 62 | 1 << 32);
    }

    #[test]
    fn heartbeats_wrap_without_touching_the_incarnation() {
        let lease = Lease::with(1, 7, HEARTBEAT_MASK);
        assert_eq!(lease.renewed().heartbeat(), 0);
        assert_eq!(lease.renewed().incarnation(), 7);
    }
}
