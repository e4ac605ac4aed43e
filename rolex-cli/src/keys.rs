//! Key sets: synthetic distributions (as the ROLEX paper) and SOSD binary files.

use std::path::Path;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal};

/// A key distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDist {
    /// Uniform random 64-bit keys.
    Uniform,
    /// 0, 1, 2, …
    Sequential,
    /// Normal, scaled to [0, 10^12].
    Normal,
    /// Lognormal (σ = 2), scaled to [0, 10^12].
    Lognormal,
}

/// The order in which inserted keys arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InsertOrder {
    /// Drawn from the same distribution as the loaded keys, in random order.
    #[default]
    Random,
    /// Ascending, above every loaded key — time-stamped keys arriving (the loaded keys are the
    /// distribution's smallest).
    Append,
}

impl KeySet {
    /// The same keys with the inserts arriving in `order`: for `Append`, the loaded keys become
    /// the smallest of all and the inserts ascend above them.
    pub fn in_order(self, order: InsertOrder) -> Self {
        match order {
            InsertOrder::Random => self,
            InsertOrder::Append => {
                let loaded_count = self.loaded.len();
                let mut all = self.loaded;
                all.extend(self.to_insert);
                all.sort_unstable();
                all.dedup();
                let to_insert = all.split_off(loaded_count.min(all.len()));
                KeySet {
                    loaded: all,
                    to_insert,
                }
            }
        }
    }
}

/// `n` distinct keys ascending above `top`, evenly spaced (at most 2^16 apart) — appends to a
/// key set whose largest key is `top` (fewer if the key space above `top` runs out).
pub fn ascending_above(top: u64, n: u64) -> Vec<u64> {
    let step = ((u64::MAX - top) / n.saturating_add(1)).clamp(1, 1 << 16);
    (1..=n)
        .map_while(|i| top.checked_add(i.checked_mul(step)?))
        .collect()
}

/// The bulk-loaded keys (sorted) and a pool of further keys from the same distribution for
/// inserts (in insertion order).
#[derive(Debug)]
pub struct KeySet {
    pub loaded: Vec<u64>,
    pub to_insert: Vec<u64>,
}

/// `loaded` keys plus `extra` insert keys of `dist`, disjoint, from `seed`.
pub fn generate(dist: KeyDist, loaded: usize, extra: usize, seed: u64) -> KeySet {
    let mut rng = StdRng::seed_from_u64(seed);
    if dist == KeyDist::Sequential {
        return KeySet {
            loaded: (0..loaded as u64).collect(),
            to_insert: (loaded as u64..(loaded + extra) as u64).collect(),
        };
    }
    let total = loaded + extra;
    let mut keys: Vec<u64> = match dist {
        KeyDist::Uniform => (0..total + total / 100 + 16)
            .map(|_| rng.random::<u64>())
            .collect(),
        KeyDist::Normal | KeyDist::Lognormal => {
            // Scaled to [0, 10^12]: duplicates appear; draw a little more and dedup.
            let draw = total + total / 4 + 16;
            let samples: Vec<f64> = match dist {
                KeyDist::Normal => {
                    let d = Normal::new(0.0, 1.0).expect("constant parameters are valid");
                    (0..draw).map(|_| d.sample(&mut rng)).collect()
                }
                _ => {
                    let d = LogNormal::new(0.0, 2.0).expect("constant parameters are valid");
                    (0..draw).map(|_| d.sample(&mut rng)).collect()
                }
            };
            let (lo, hi) = samples
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let span = (hi - lo).max(f64::MIN_POSITIVE);
            samples
                .into_iter()
                .map(|x| ((x - lo) / span * 1e12) as u64)
                .collect()
        }
        KeyDist::Sequential => Vec::new(),
    };
    keys.sort_unstable();
    keys.dedup();
    keys.shuffle(&mut rng);
    keys.truncate(total);
    let split = loaded.min(keys.len());
    let to_insert = keys.split_off(split);
    keys.sort_unstable();
    KeySet {
        loaded: keys,
        to_insert,
    }
}

/// One key in this many is bulk-loaded before a measured load phase (`--load-phase`); the
/// load phase inserts the rest.
pub const LOAD_PHASE_BULK_EVERY: usize = 100;

/// How a measured load phase (`--load-phase`, YCSB's `load`) puts a run's keys in the store. A
/// store cannot start empty (ROLEX trains its first models on a bulk load, and every index
/// range-partitions its memory nodes by the keys it is given), so one key in
/// [`LOAD_PHASE_BULK_EVERY`] (at least one per memory node) is bulk-loaded and the load phase
/// inserts the rest, measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadPlan {
    /// The keys bulk-loaded, sorted.
    pub bulk: Vec<u64>,
    /// The keys the load phase inserts, in insertion order.
    pub inserts: Vec<u64>,
}

impl LoadPlan {
    /// The plan for `keys` (the run's loaded keys, sorted or not) over `memory_nodes`:
    /// - `Random` insert order (YCSB's hashed order): every hundredth key of the sorted keys is
    ///   bulk-loaded, so the bulk load spans the key space; the rest arrive in a random order
    ///   drawn from `seed`.
    /// - `Append`: the smallest keys are bulk-loaded and the rest arrive ascending above them,
    ///   as time-stamped keys do.
    pub fn new(keys: &[u64], order: InsertOrder, seed: u64, memory_nodes: u64) -> Self {
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        let wanted = sorted
            .len()
            .div_ceil(LOAD_PHASE_BULK_EVERY)
            .max(memory_nodes as usize)
            .min(sorted.len());
        match order {
            InsertOrder::Append => {
                let inserts = sorted.split_off(wanted);
                LoadPlan {
                    bulk: sorted,
                    inserts,
                }
            }
            InsertOrder::Random => {
                let step = (sorted.len() / wanted.max(1)).max(1);
                let (mut bulk, mut inserts) = (Vec::with_capacity(wanted), Vec::new());
                for (i, &k) in sorted.iter().enumerate() {
                    if i % step == 0 && bulk.len() < wanted {
                        bulk.push(k);
                    } else {
                        inserts.push(k);
                    }
                }
                inserts.shuffle(&mut StdRng::seed_from_u64(seed ^ 0x6c6f_6164));
                LoadPlan { bulk, inserts }
            }
        }
    }
}

/// The most keys read from a SOSD key file (32 GiB of keys; SOSD's largest data sets hold
/// 800 million).
pub const MAX_SOSD_KEYS: u64 = 1 << 32;

/// The key count a SOSD key file's header announces (its first eight bytes, little-endian),
/// refused above [`MAX_SOSD_KEYS`]. `flag` names the file's flag in messages.
pub fn sosd_count(path: &Path, flag: &str) -> Result<u64, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    sosd_header(&mut file, path, flag)
}

/// [`sosd_count`] from `file`, opened on `path`, read up to its keys.
fn sosd_header(file: &mut impl std::io::Read, path: &Path, flag: &str) -> Result<u64, String> {
    let shown = path.display();
    let mut header = [0u8; 8];
    file.read_exact(&mut header).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            format!("{shown}: too short for a SOSD key file (no count)")
        }
        _ => format!("{shown}: {e}"),
    })?;
    let count = u64::from_le_bytes(header);
    if count > MAX_SOSD_KEYS {
        return Err(format!(
            "{flag} {shown}: the SOSD header announces {count} keys; at most {MAX_SOSD_KEYS} ({}) are read",
            crate::checks::bytes_text(MAX_SOSD_KEYS * 8)
        ));
    }
    Ok(count)
}

/// Reads a SOSD key file: a little-endian `u64` count, then that many sorted `u64` keys.
/// Duplicates (SOSD files may hold them) are dropped, and a line on stderr says how many (a
/// store holds each key once). Any malformation is an error. What is read is bounded by the
/// header's count (at most [`MAX_SOSD_KEYS`], and what this machine's memory holds): a file or
/// device holding more (`/dev/zero`) is refused at the first byte past it.
pub fn read_sosd(path: &Path, flag: &str) -> Result<Vec<u64>, String> {
    use std::io::Read;
    let shown = path.display();
    // Opened once: a pipe's header is read from the same stream as its keys.
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let count = sosd_header(&mut reader, path, flag)?;
    let body_bytes = count * 8;
    crate::checks::memory_fits(
        body_bytes,
        &format!("{count} keys of 8 bytes"),
        &format!("{flag} {shown}"),
    )?;
    let mismatch = |held: String| {
        format!("{shown}: SOSD header announces {count} keys, the file holds {held} bytes of keys")
    };
    if meta.is_file() && meta.len().saturating_sub(8) != body_bytes {
        return Err(mismatch(meta.len().saturating_sub(8).to_string()));
    }
    // A regular file's length matched its header: room for every key at once; from anything
    // else, room as the keys arrive.
    let capacity = if meta.is_file() {
        count
    } else {
        count.min(1 << 20)
    };
    let mut keys: Vec<u64> = Vec::with_capacity(capacity as usize);
    let mut word = [0u8; 8];
    for read in 0..count {
        if let Err(e) = reader.read_exact(&mut word) {
            return Err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof => mismatch(format!("only {}", read * 8)),
                _ => format!("{shown}: {e}"),
            });
        }
        keys.push(u64::from_le_bytes(word));
    }
    let mut one = [0u8; 1];
    match reader.read(&mut one) {
        Ok(0) => {}
        Ok(_) => {
            return Err(format!(
                "{flag} {shown}: the SOSD header announces {count} keys ({body_bytes} bytes), the file holds more; refused at the first byte past them"
            ));
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    if !keys.is_sorted() {
        return Err(format!("{shown}: SOSD keys are not sorted"));
    }
    let before = keys.len();
    keys.dedup();
    if keys.len() < before {
        eprintln!(
            "rolex: {shown}: {} duplicate keys dropped ({} distinct loaded)",
            before - keys.len(),
            keys.len()
        );
    }
    if keys.is_empty() {
        return Err(format!("{shown}: the key file holds no keys"));
    }
    Ok(keys)
}

#[cfg(test)]
mod order_tests {
    use super::*;

    #[test]
    fn append_order_ascends_above_every_loaded_key() {
        let set = generate(KeyDist::Uniform, 1000, 500, 3).in_order(InsertOrder::Append);
        assert_eq!((set.loaded.len(), set.to_insert.len()), (1000, 500));
        let top = set.loaded.last().copied().unwrap_or(0);
        assert!(set.to_insert.windows(2).all(|w| w[0] < w[1]));
        assert!(set.to_insert.iter().all(|&k| k > top));
        assert!(set.loaded.is_sorted());
    }

    #[test]
    fn a_load_plan_bulk_loads_one_key_in_a_hundred_and_inserts_each_other_key_once() {
        let set = generate(KeyDist::Uniform, 10_000, 0, 5);
        for order in [InsertOrder::Random, InsertOrder::Append] {
            let plan = LoadPlan::new(&set.loaded, order, 9, 2);
            assert_eq!(plan.bulk.len(), 100, "{order:?}");
            assert!(plan.bulk.is_sorted());
            let mut all: Vec<u64> = plan.bulk.iter().chain(&plan.inserts).copied().collect();
            all.sort_unstable();
            assert_eq!(all, set.loaded, "{order:?}: every key exactly once");
        }
        let random = LoadPlan::new(&set.loaded, InsertOrder::Random, 9, 2);
        // Spread over the key space: the bulk load's first and last keys are near the ends.
        assert_eq!(random.bulk[0], set.loaded[0]);
        assert!(random.bulk[99] >= set.loaded[9_800]);
        assert!(
            !random.inserts.is_sorted(),
            "inserts arrive in a random order"
        );
        let append = LoadPlan::new(&set.loaded, InsertOrder::Append, 9, 2);
        assert_eq!(append.bulk[..], set.loaded[..100]);
        assert!(append.inserts.is_sorted(), "appends ascend");
        // Tiny key sets: at least one key per memory node, never more keys than there are.
        let tiny = LoadPlan::new(&[5, 1, 9], InsertOrder::Random, 1, 2);
        assert_eq!(tiny.bulk, [1, 5]);
        assert_eq!(tiny.inserts, [9]);
        assert_eq!(LoadPlan::new(&[7], InsertOrder::Random, 1, 4).bulk, [7]);
    }
}
