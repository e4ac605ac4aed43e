//! One memory node's memory: bytes that are only touched through 8-byte atomic words.

#[cfg(not(loom))]
use std::path::Path;
use std::path::PathBuf;

use crate::sync::atomic::{AtomicU64, Ordering};

/// Why a pool could not be created or attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// Pools are made of whole 8-byte words and must not be empty.
    #[error("a pool's size must be a non-zero multiple of 8 bytes, not {0}")]
    BadSize(u64),
    /// Creating, opening, sizing or mapping the pool file failed.
    #[error("pool file {}: {source}", path.display())]
    Io {
        /// The pool file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// Pools given to a transport do not fit together (e.g. one memory-node id twice).
    #[error("{0}")]
    Config(String),
}

/// The memory of one simulated memory node.
///
/// Guarantees: every access is an atomic operation on an aligned 8-byte word, so concurrent
/// access from any number of threads or processes is free of data races; multi-word copies are
/// *not* atomic as a whole and may tear between words, as RDMA READs and WRITEs may.
pub struct Pool {
    memory: Memory,
    len: u64,
    /// Serializes this process's atomics in NIC-atomics mode ([`Pool::nic_atomic`]).
    atomic_unit: crate::sync::Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

fn check_size(len: u64) -> Result<usize, PoolError> {
    if len == 0 || !len.is_multiple_of(8) {
        return Err(PoolError::BadSize(len));
    }
    usize::try_from(len).map_err(|_| PoolError::BadSize(len))
}

#[cfg(not(loom))]
mod backing {
    use super::*;
    use std::fs::OpenOptions;

    /// A shared or anonymous mapping viewed as words.
    pub(super) struct Memory {
        map: memmap2::MmapMut,
    }

    impl Memory {
        pub(super) fn words(&self) -> &[AtomicU64] {
            let ptr = self.map.as_ptr().cast::<AtomicU64>();
            // SAFETY: the mapping is page-aligned (so 8-byte aligned), its length is a non-zero
            // multiple of 8 (checked by `check_size`, and a file's length is checked on attach),
            // and `AtomicU64` has the size and alignment of `u64`. The mapping lives as long as
            // `self`. Every access in this process goes through these atomics (the map is never
            // read or written as plain bytes), and other processes attach through this same code,
            // so there are no non-atomic accesses to race with.
            unsafe { std::slice::from_raw_parts(ptr, self.map.len() / 8) }
        }

        pub(super) fn anonymous(len: usize) -> Result<Self, PoolError> {
            let map = memmap2::MmapMut::map_anon(len).map_err(|source| PoolError::Io {
                path: PathBuf::from("<anonymous>"),
                source,
            })?;
            Ok(Self { map })
        }

        pub(super) fn file(path: &Path, len: Option<u64>) -> Result<(Self, u64), PoolError> {
            let io = |source| PoolError::Io {
                path: path.to_path_buf(),
                source,
            };
            let mut options = OpenOptions::new();
            options.read(true).write(true);
            if len.is_some() {
                options.create_new(true);
            }
            let file = options.open(path).map_err(io)?;
            // The file holds the region, then the simulated NIC's area.
            let len = match len {
                Some(len) => {
                    file.set_len(len + crate::nic::NIC_AREA_BYTES).map_err(io)?;
                    len
                }
                None => {
                    let file_len = file.metadata().map_err(io)?.len();
                    file_len
                        .checked_sub(crate::nic::NIC_AREA_BYTES)
                        .filter(|&len| len > 0)
                        .ok_or(PoolError::BadSize(file_len))?
                }
            };
            check_size(len)?;
            // SAFETY: the mapping is shared with other processes that attach to the same file.
            // That is the point of a pool file: all of them access it only through the atomic
            // words of `words()`, so no process observes a torn or racy non-atomic access. If the
            // file is truncated by someone outside ROLEX, accesses may fault (SIGBUS); pool files
            // are documented as owned by ROLEX while attached.
            let map = unsafe { memmap2::MmapOptions::new().map_mut(&file) }.map_err(io)?;
            Ok((Self { map }, len))
        }

        pub(super) fn flush(&self) -> std::io::Result<()> {
            self.map.flush()
        }
    }
}

#[cfg(loom)]
mod backing {
    use super::*;

    /// Under loom: a vector of loom atomics, so every word access is a scheduling point.
    pub(super) struct Memory {
        words: Vec<AtomicU64>,
    }

    impl Memory {
        pub(super) fn words(&self) -> &[AtomicU64] {
            &self.words
        }

        pub(super) fn anonymous(len: usize) -> Result<Self, PoolError> {
            Ok(Self {
                words: (0..len / 8).map(|_| AtomicU64::new(0)).collect(),
            })
        }
    }
}

use backing::Memory;

/// Loads one word for a READ (see [`store_word`] for why loom builds differ).
#[inline]
fn load_word(word: &AtomicU64) -> u64 {
    if cfg!(loom) {
        word.fetch_add(0, Ordering::AcqRel)
    } else {
        word.load(Ordering::Acquire)
    }
}

/// Stores one word for a WRITE.
///
/// Under loom every word access is a read-modify-write (`fetch_add(0)` to load, `swap` to store):
/// same values, but loom then sees every access to a word as conflicting with every other one and
/// explores all their interleavings. Two loom behaviours were measured that make plain loads and
/// stores unusable here: (1) with plain loads, a thread that READs a record and then WRITEs it
/// back, racing a reader, was explored in a single schedule, so a torn read could never be found;
/// (2) mixing `fetch_add(0)` loads with plain stores, loom reported a lost update under a correct
/// CAS lock that C11 coherence forbids. RDMA gives no weak-memory semantics to model anyway: what
/// matters is the interleaving of whole-word accesses, and all-RMW access explores exactly that.
#[inline]
fn store_word(word: &AtomicU64, value: u64) {
    if cfg!(loom) {
        word.swap(value, Ordering::AcqRel);
    } else {
        word.store(value, Ordering::Release);
    }
}

impl Pool {
    /// A zero-filled pool of `len` bytes in anonymous memory (this process only).
    pub fn anonymous(len: u64) -> Result<Self, PoolError> {
        let bytes = check_size(len)?;
        Ok(Self {
            memory: Memory::anonymous(bytes + crate::nic::NIC_BYTES as usize)?,
            len,
            atomic_unit: crate::sync::Mutex::new(()),
        })
    }

    /// Creates the pool file `path` of `len` zero bytes and maps it shared. Fails if the file
    /// already exists, so an existing pool is never clobbered.
    #[cfg(not(loom))]
    pub fn create_file(path: impl AsRef<Path>, len: u64) -> Result<Self, PoolError> {
        check_size(len)?;
        let (memory, len) = Memory::file(path.as_ref(), Some(len))?;
        Ok(Self {
            memory,
            len,
            atomic_unit: crate::sync::Mutex::new(()),
        })
    }

    /// Attaches to the existing pool file `path`, mapped shared: this process then sees every
    /// other attached process's writes and atomics, and they see its own.
    #[cfg(not(loom))]
    pub fn open_file(path: impl AsRef<Path>) -> Result<Self, PoolError> {
        let (memory, len) = Memory::file(path.as_ref(), None)?;
        Ok(Self {
            memory,
            len,
            atomic_unit: crate::sync::Mutex::new(()),
        })
    }

    /// Asks the operating system to write a file-backed pool's pages to disk (a no-op for
    /// anonymous pools). Not needed for other processes to see the data.
    #[cfg(not(loom))]
    pub fn flush(&self) -> std::io::Result<()> {
        self.memory.flush()
    }

    /// The first byte of the pool's memory, for registering it with an RDMA NIC (the verbs
    /// backend serves a pool to compute nodes). Obtaining it is safe; anything done through it
    /// must access the memory only as 8-byte atomic words, like this type does.
    #[cfg(not(loom))]
    pub fn base_ptr(&self) -> *mut u8 {
        self.memory.words().as_ptr().cast::<u8>().cast_mut()
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: pools are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn words(&self) -> &[AtomicU64] {
        &self.memory.words()[..self.len as usize / 8]
    }

    /// The simulated NIC's area behind the region (see [`crate::nic`]).
    pub(crate) fn nic(&self) -> &[AtomicU64] {
        &self.memory.words()[self.len as usize / 8..]
    }

    /// Copies `buf.len()` bytes starting at byte `offset` into `buf`, one atomic word load at a
    /// time; `between_words` runs after every word. The caller has checked bounds.
    pub(crate) fn read_bytes(&self, offset: u64, buf: &mut [u8], mut between_words: impl FnMut()) {
        let words = self.words();
        let mut pos = offset as usize;
        let mut done = 0;
        if pos.is_multiple_of(8) {
            // Fast path: whole aligned words.
            let whole = buf.len() / 8 * 8;
            let first = pos / 8;
            for (chunk, word) in buf[..whole].chunks_exact_mut(8).zip(&words[first..]) {
                chunk.copy_from_slice(&load_word(word).to_le_bytes());
                between_words();
            }
            pos += whole;
            done = whole;
        }
        while done < buf.len() {
            let in_word = pos % 8;
            let take = (8 - in_word).min(buf.len() - done);
            let bytes = load_word(&words[pos / 8]).to_le_bytes();
            buf[done..done + take].copy_from_slice(&bytes[in_word..in_word + take]);
            pos += take;
            done += take;
            between_words();
        }
    }

    /// Copies `data` to byte `offset`, one atomic word at a time; bytes of a partially covered
    /// word outside the range are preserved (merged with a CAS loop). The caller has checked bounds.
    pub(crate) fn write_bytes(&self, offset: u64, data: &[u8], mut between_words: impl FnMut()) {
        let words = self.words();
        let mut pos = offset as usize;
        let mut done = 0;
        if pos.is_multiple_of(8) {
            // Fast path: whole aligned words.
            let whole = data.len() / 8 * 8;
            let first = pos / 8;
            for (chunk, word) in data[..whole].chunks_exact(8).zip(&words[first..]) {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(chunk);
                store_word(word, u64::from_le_bytes(bytes));
                between_words();
            }
            pos += whole;
            done = whole;
        }
        while done < data.len() {
            let in_word = pos % 8;
            let take = (8 - in_word).min(data.len() - done);
            let word = &words[pos / 8];
            if take == 8 {
                let value = u64::from_le_bytes(data[done..done + 8].try_into().unwrap_or_default());
                store_word(word, value);
            } else {
                let mut current = load_word(word);
                loop {
                    let mut bytes = current.to_le_bytes();
                    bytes[in_word..in_word + take].copy_from_slice(&data[done..done + take]);
                    match word.compare_exchange_weak(
                        current,
                        u64::from_le_bytes(bytes),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(seen) => current = seen,
                    }
                }
            }
            pos += take;
            done += take;
            between_words();
        }
    }

    /// Atomic compare-and-swap of the aligned word at byte `offset`; returns the previous value.
    pub(crate) fn cas(&self, offset: u64, expected: u64, desired: u64) -> u64 {
        match self.words()[offset as usize / 8].compare_exchange(
            expected,
            desired,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(old) | Err(old) => old,
        }
    }

    /// Atomic wrapping fetch-and-add on the aligned word at byte `offset`; returns the previous value.
    pub(crate) fn faa(&self, offset: u64, add: u64) -> u64 {
        self.words()[offset as usize / 8].fetch_add(add, Ordering::AcqRel)
    }

    /// A CAS (`Some(expected)`, `desired`) or FAA (`None`, `add`) as a NIC runs it: atomic with
    /// respect to this process's other atomics on the pool (they queue on `atomic_unit`), not to
    /// WRITEs: it reads the word, runs `between` (where others may go), then writes its result
    /// over whatever a WRITE put there meanwhile. Returns the word it read.
    pub(crate) fn nic_atomic(
        &self,
        offset: u64,
        expected: Option<u64>,
        operand: u64,
        between: impl FnOnce(),
    ) -> u64 {
        let _unit = self.atomic_unit.lock().unwrap_or_else(|e| e.into_inner());
        let word = &self.words()[offset as usize / 8];
        let old = load_word(word);
        between();
        match expected {
            Some(expected) if old == expected => store_word(word, operand),
            Some(_) => {}
            None => store_word(word, old.wrapping_add(operand)),
        }
        old
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::nic::HUGE_PAGE_BYTES;

    /// What the README promises of hugetlbfs: a pool file whose region is a whole number of 2 MiB
    /// pages is one too (hugetlbfs refuses any other length), and opens with its region's length.
    #[test]
    fn a_pool_of_whole_huge_pages_makes_a_file_of_whole_huge_pages() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (i, len) in [2u64 << 20, 96 << 20, 130 << 20].into_iter().enumerate() {
            let path = dir.path().join(format!("pool{i}"));
            let pool = Pool::create_file(&path, len).expect("create");
            let file_len = std::fs::metadata(&path).expect("metadata").len();
            assert_eq!(
                file_len % HUGE_PAGE_BYTES,
                0,
                "{len}: file of {file_len} bytes"
            );
            drop(pool);
            assert_eq!(Pool::open_file(&path).expect("open").len(), len);
        }
    }
}
