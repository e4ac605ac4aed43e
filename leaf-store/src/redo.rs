//! Redo leaves: rewriting a leaf longer than one packet in place so that no cut connection can
//! lose it.
//!
//! A NIC places a WRITE packet by packet (the path MTU: 1 KiB on the verbs backend), and a queue
//! pair moved to the error state — a fence, a killed process — can leave a prefix of a WRITE's
//! packets placed. A leaf longer than one packet is then **torn**: its old image partly
//! overwritten by its new one, and neither whole anywhere. So every in-place WRITE of such a leaf
//! is three WRITEs of one batch, which a queue pair places in order ([`in_place`]):
//!
//! 1. the new image to a **redo leaf** of the writer: box slot [`REDO_SLOT`] of its connection (a
//!    leaf the memory node granted it like the rest of its box, never taken for a split);
//! 2. the new image in place;
//! 3. the redo leaf's checksum word zeroed.
//!
//! A leaf's checksum is seeded with its number, so an image validates only as the leaf it was
//! made for, and a torn or zeroed one as none.
//!
//! **Invariant.** While a leaf L is under a lock, at most one leaf of the lock holder's boxes that
//! no chain links validates as L; if L is torn, exactly one does, and it holds the image the cut
//! WRITE was placing. Step 1 was placed whole before step 2 began; every older image of L in the
//! holder's boxes was invalidated before L's lock was last let go — by step 3, which precedes the
//! unlock CAS of its batch, or by the repair below, which invalidates every box leaf that
//! validates as a leaf of the chain before it releases the lock.
//!
//! **Repair** ([`plan_repair`]). Recovery of a dead compute node, and a live node's recovery of
//! a lock its own broken operation left, restore each torn leaf from that image, invalidate every
//! box leaf that validates as a leaf of the chain, and then write their own trims (the rule of
//! [`crate::repair`]) the same three-step way, with an unlinked leaf of the holder's boxes as
//! scratch. A repairer cut off half-way (a memory node restarted, a renewer killed) leaves what
//! the next attempt finishes: a torn leaf with its one image in the holder's boxes.
//!
//! Leaves of at most one packet (the default δ = 16 makes 280-byte leaves) are written in place
//! as one WRITE, as before: a packet lands whole or not at all.

use std::collections::HashSet;

use rdma_transport::{RemoteAddr, Verb};

use crate::members::LEAF_BOX;
use crate::repair::trim_chain;
use crate::{Layout, Leaf, LeafStoreError, LeafTableEntry, ModelRecord};

/// The box slot of a connection that holds its redo leaf when leaves are longer than a packet.
pub const REDO_SLOT: u64 = LEAF_BOX - 1;

/// What step 3 writes over a redo leaf's checksum word: no leaf's checksum (a checksum of 0 has
/// a 2⁻⁶⁴ chance).
pub const INVALID_CHECKSUM: [u8; 8] = [0; 8];

/// Whether `layout`'s leaves are longer than one packet of `packet_bytes`
/// ([`rdma_transport::Endpoint::packet_bytes`]): then every in-place leaf WRITE goes through a
/// redo leaf.
pub fn needs_redo(layout: &Layout, packet_bytes: usize) -> bool {
    layout.leaf_bytes() > packet_bytes as u64
}

/// Appends the WRITEs that put `image` into the leaf at `target` in place: with a `redo` leaf
/// (its address), the three steps of the module documentation, else the one WRITE. `fenced`
/// fences the in-place WRITE behind the verbs before it.
pub fn in_place<'a>(
    verbs: &mut impl Extend<Verb<'a>>,
    target: RemoteAddr,
    image: &'a [u8],
    redo: Option<RemoteAddr>,
    fenced: bool,
) {
    let write = Verb::write(target, image);
    let write = if fenced { write.fenced() } else { write };
    match redo {
        Some(redo) => verbs.extend([
            Verb::write(redo, image),
            write,
            Verb::write(redo, &INVALID_CHECKSUM),
        ]),
        None => verbs.extend([write]),
    }
}

/// The contents of a lock holder's box leaves that no chain links: where the images of its torn
/// leaves are.
#[derive(Debug, Clone, Default)]
pub struct BoxImages {
    leaves: Vec<(u64, Vec<u8>)>,
}

impl BoxImages {
    /// Reads `leaves` (box leaves of the holder that no chain links). Leaves beyond the region's
    /// capacity are left out.
    pub fn read<E: rdma_transport::Endpoint>(
        ep: &mut E,
        layout: &Layout,
        leaves: &[u64],
    ) -> Result<Self, LeafStoreError> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for &leaf in leaves {
            if leaf >= layout.leaf_capacity() || !seen.insert(leaf) {
                continue;
            }
            let mut bytes = vec![0u8; layout.leaf_bytes() as usize];
            ep.read(layout.leaf_addr(leaf), &mut bytes)?;
            out.push((leaf, bytes));
        }
        Ok(Self { leaves: out })
    }

    /// The box leaves read.
    pub fn leaves(&self) -> impl Iterator<Item = u64> + '_ {
        self.leaves.iter().map(|&(leaf, _)| leaf)
    }

    /// The box leaves (other than `leaf_num` itself) whose contents validate as leaf `leaf_num`,
    /// with those contents.
    fn images_of(&self, leaf_num: u64) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.leaves
            .iter()
            .filter(move |(b, bytes)| *b != leaf_num && Leaf::decode(leaf_num, bytes).is_ok())
            .map(|(b, bytes)| (*b, bytes.as_slice()))
    }
}

/// What repairing one locked chain writes, in this order: the restores, the invalidations, the
/// trims (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainRepair {
    /// Torn leaves and the image each is restored to (the one its holder's boxes held).
    pub restores: Vec<(u64, Vec<u8>)>,
    /// Box leaves whose contents validate as a leaf of the chain: their checksum word is zeroed.
    pub invalidate: Vec<u64>,
    /// Leaves the repair rule changes, with their new images.
    pub trims: Vec<(u64, Vec<u8>)>,
    /// New leaves of a split stopped before its link, which claim keys of the chain: their
    /// images without the claim (unlinked leaves: written in place, a tear leaves them invalid).
    pub withdrawals: Vec<(u64, Vec<u8>)>,
    /// A leaf of the chain is torn and no box leaf (or more than one image) restores it, or it
    /// holds impossible contents: the chain is released as it is (its images invalidated, nothing
    /// else written), and `verify` reports the leaf.
    pub damaged: bool,
}

impl ChainRepair {
    /// Whether the repair writes nothing.
    pub fn is_empty(&self) -> bool {
        self.restores.is_empty()
            && self.invalidate.is_empty()
            && self.trims.is_empty()
            && self.withdrawals.is_empty()
    }

    /// Appends the repair's WRITEs: [`Self::push_restores`], then [`Self::push_trims`].
    pub fn push_verbs<'a>(
        &'a self,
        verbs: &mut Vec<Verb<'a>>,
        layout: &Layout,
        scratch: Option<u64>,
        redo: bool,
    ) {
        self.push_restores(verbs, layout);
        self.push_trims(verbs, layout, scratch, redo);
    }

    /// Appends the restores, then the invalidations, each fenced behind the verbs before it.
    pub fn push_restores<'a>(&'a self, verbs: &mut Vec<Verb<'a>>, layout: &Layout) {
        for (leaf, image) in &self.restores {
            verbs.push(Verb::write(layout.leaf_addr(*leaf), image).fenced());
        }
        for &leaf in &self.invalidate {
            verbs.push(Verb::write(layout.leaf_addr(leaf), &INVALID_CHECKSUM).fenced());
        }
    }

    /// Appends the trims, each fenced behind the verbs before it; trims of leaves longer than a
    /// packet go through `scratch` (an unlinked leaf of the holder's boxes) when `redo` says so.
    pub fn push_trims<'a>(
        &'a self,
        verbs: &mut Vec<Verb<'a>>,
        layout: &Layout,
        scratch: Option<u64>,
        redo: bool,
    ) {
        let scratch = scratch.filter(|_| redo).map(|leaf| layout.leaf_addr(leaf));
        for (leaf, image) in &self.trims {
            in_place(verbs, layout.leaf_addr(*leaf), image, scratch, true);
        }
        self.push_withdrawals(verbs, layout);
    }

    /// Appends the withdrawals, each fenced behind the verbs before it (unlinked leaves: written
    /// in place, a tear leaves them invalid). A damaged chain's repair writes only these.
    pub fn push_withdrawals<'a>(&'a self, verbs: &mut Vec<Verb<'a>>, layout: &Layout) {
        for (leaf, image) in &self.withdrawals {
            verbs.push(Verb::write(layout.leaf_addr(*leaf), image).fenced());
        }
    }
}

/// Reads trained leaf `leaf`'s chain of `record` (locked by a holder whose unlinked box leaves
/// `images` holds) and plans its repair: torn leaves restored from their one image, every box
/// leaf that validates as a leaf of the chain invalidated, the repair rule's trims. A chain whose
/// entries cannot be followed, or with a leaf no image restores, is `damaged`: only its images
/// are invalidated.
pub fn plan_repair<E: rdma_transport::Endpoint>(
    ep: &mut E,
    layout: &Layout,
    record: &ModelRecord,
    leaf: usize,
    images: &BoxImages,
) -> Result<ChainRepair, LeafStoreError> {
    let Ok(entries) = record.chain_entries(leaf) else {
        // Nothing withdrawn either: which leaves are unlinked is not known.
        return Ok(ChainRepair {
            damaged: true,
            ..ChainRepair::default()
        });
    };
    let delta = layout.delta();
    let mut repair = ChainRepair::default();
    let mut chain: Vec<(LeafTableEntry, Leaf)> = Vec::with_capacity(entries.len());
    let mut bytes = vec![0u8; layout.leaf_bytes() as usize];
    for entry in entries {
        let n = entry.leaf_num();
        if n >= layout.leaf_capacity() {
            repair.damaged = true;
            continue;
        }
        // Under the holder's lock, fenced, nothing writes these leaves: one READ is the truth.
        ep.read(layout.leaf_addr(n), &mut bytes)?;
        let images: Vec<(u64, &[u8])> = images.images_of(n).collect();
        // Every image is invalidated, damaged chain or not: one left valid could later pass
        // for the image of another holder's write of this leaf.
        for &(b, _) in &images {
            if !repair.invalidate.contains(&b) {
                repair.invalidate.push(b);
            }
        }
        let contents = match Leaf::decode(n, &bytes) {
            Ok(contents) => Some(contents),
            Err(LeafStoreError::TornLeaf { .. }) => {
                let distinct: HashSet<&[u8]> = images.iter().map(|&(_, image)| image).collect();
                match distinct.into_iter().collect::<Vec<_>>()[..] {
                    [image] => Leaf::decode(n, image).ok().inspect(|_| {
                        repair.restores.push((n, image.to_vec()));
                    }),
                    _ => None,
                }
            }
            // A valid checksum over impossible contents (count above δ, unsorted keys).
            Err(_) => None,
        };
        match contents {
            Some(contents) => chain.push((entry, contents)),
            None => repair.damaged = true,
        }
    }
    // Damaged or not, a claim an unfinished split left is withdrawn.
    repair.withdrawals = withdrawals(ep, layout, record, leaf)?;
    if repair.damaged {
        // Released as it is (`verify` reports the leaf); nothing restored or trimmed, every
        // image invalidated.
        repair.restores.clear();
        return Ok(repair);
    }
    for (n, contents) in trim_chain(&chain)? {
        repair.trims.push((n, contents.encode(n, delta)?));
    }
    Ok(repair)
}

/// A split stopped before its link leaves its new leaf claiming keys of trained leaf `leaf`'s
/// chain that the split leaf still holds and that change once the lock is released: the images
/// of such leaves without their claims (the SLT entry, written before the leaf, names it; a live
/// writer's new leaf claims keys of its own chain, never of this one, whose lock the caller
/// holds).
fn withdrawals<E: rdma_transport::Endpoint>(
    ep: &mut E,
    layout: &Layout,
    record: &ModelRecord,
    leaf: usize,
) -> Result<Vec<(u64, Vec<u8>)>, LeafStoreError> {
    let delta = layout.delta();
    let mut bytes = vec![0u8; layout.leaf_bytes() as usize];
    let (lo, hi) = record.chain_range(leaf);
    let mut withdrawn = Vec::new();
    for n in record.unlinked_synonyms() {
        if n >= layout.leaf_capacity() {
            continue;
        }
        ep.read(layout.leaf_addr(n), &mut bytes)?;
        let Ok(mut stray) = Leaf::decode(n, &bytes) else {
            continue;
        };
        if stray.claim().is_some_and(|(a, b)| a <= hi && lo <= b) {
            stray.set_claim(None);
            withdrawn.push((n, stray.encode(n, delta)?));
        }
    }
    Ok(withdrawn)
}
