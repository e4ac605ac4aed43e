//! The leaf lock: the lock bit of a trained leaf's LT entry, taken and released by CAS.
//!
//! One lock covers a trained leaf and its whole synonym chain. Taking it is a CAS from the entry
//! unlocked to the same entry locked by the taker's member tag (see [`crate::members`]: recovery
//! finds a dead compute node's locks by it); releasing it is a CAS from the locked entry to the unlocked
//! one, optionally installing a new synonym pointer in the same CAS (linking a new synonym leaf
//! and unlocking cost one verb).

use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::{LeafStoreError, LeafTableEntry};

/// The CAS that locks the entry at `addr` for member `owner`, expected to hold `current` (lock
/// bit ignored: the CAS expects it clear). Succeeds iff the returned old value equals
/// `current.unlocked()`.
pub fn lock_verb(addr: RemoteAddr, current: LeafTableEntry, owner: u8) -> Verb<'static> {
    Verb::cas(
        addr,
        current.unlocked().raw(),
        current.unlocked().locked_by(owner).raw(),
    )
}

/// Tries once to lock the entry at `addr` for member `owner`, expected to hold `current`.
/// `Ok(Ok(locked entry))` on success; `Ok(Err(actual))` with the entry's actual value if it was
/// locked or had changed.
pub fn try_lock<E: Endpoint>(
    ep: &mut E,
    addr: RemoteAddr,
    current: LeafTableEntry,
    owner: u8,
) -> Result<Result<LeafTableEntry, LeafTableEntry>, LeafStoreError> {
    let expected = current.unlocked();
    let old = ep.cas(addr, expected.raw(), expected.locked_by(owner).raw())?;
    Ok(if old == expected.raw() {
        Ok(expected.locked_by(owner))
    } else {
        Err(LeafTableEntry::from_raw(old))
    })
}

/// The CAS that releases `held` (the locked entry at `addr`, owner tag included), installing
/// `synonym_ptr` if given.
pub fn unlock_verb(
    addr: RemoteAddr,
    held: LeafTableEntry,
    synonym_ptr: Option<u8>,
) -> Verb<'static> {
    let mut released = held.unlocked();
    if let Some(ptr) = synonym_ptr {
        released = released.with_synonym(ptr);
    }
    Verb::cas(addr, held.locked().raw(), released.raw())
}

/// Releases `held` at `addr`, installing `synonym_ptr` if given. Returns the released entry.
/// Fails with [`LeafStoreError::CorruptLeaf`] if the entry was not the one this caller locked
/// (someone broke the lock protocol); the entry is then left untouched.
pub fn unlock<E: Endpoint>(
    ep: &mut E,
    addr: RemoteAddr,
    held: LeafTableEntry,
    synonym_ptr: Option<u8>,
) -> Result<LeafTableEntry, LeafStoreError> {
    let mut verbs = [unlock_verb(addr, held, synonym_ptr)];
    ep.batch(&mut verbs)?;
    match &verbs[0] {
        Verb::Cas { old, desired, .. } if *old == held.locked().raw() => {
            Ok(LeafTableEntry::from_raw(*desired))
        }
        _ => Err(LeafStoreError::CorruptLeaf(
            "unlocked an LT entry this caller did not hold",
        )),
    }
}
