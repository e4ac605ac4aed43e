//! Latencies per `--report-interval`: each client thread keeps its operations' latencies per
//! interval, and the run merges them into each interval's percentiles (the JSON's
//! `intervals[].latency_us`) and histograms (the HdrHistogram log, an entry per interval and
//! operation type).
//!
//! **Invariant.** An operation counts in the interval the sampler was in when the operation
//! completed: the sampler advances the run's interval counter as it closes an interval, and a thread
//! that sees it advanced files what it kept for the interval before and starts afresh. What a
//! thread files is compressed at once (HdrHistogram's V2 deflate encoding, a few hundred bytes),
//! so a long run at a short interval keeps kilobytes per interval, not a histogram's hundreds.

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};

use super::latency::{OP_NAMES, latency_histogram};
use crate::error::{CliError, failed};
use crate::report::Latency;

/// One thread's latencies for the interval under way, and those it filed for earlier ones.
pub(super) struct ThreadIntervals {
    /// The interval under way (`Shared::interval_seq` when last looked at).
    at: u64,
    /// Its latencies per operation type.
    hists: Vec<Histogram<u64>>,
    /// Filed: (interval, operation type, compressed histogram).
    pub filed: Vec<(u64, usize, Vec<u8>)>,
}

impl ThreadIntervals {
    pub(super) fn new() -> Result<Self, CliError> {
        Ok(Self {
            at: 0,
            hists: (0..OP_NAMES.len())
                .map(|_| latency_histogram())
                .collect::<Result<_, _>>()?,
            filed: Vec::new(),
        })
    }

    /// An operation of type `kind` took `ns`: counted in the interval under way, `now` (none
    /// without `--report-interval`: nothing is kept).
    pub(super) fn record(&mut self, now: Option<u64>, kind: usize, ns: u64) {
        let Some(now) = now else {
            return;
        };
        if now != self.at {
            self.file();
            self.at = now;
        }
        let _ = self.hists[kind].record(ns);
    }

    /// Files what the interval under way holds (the thread is done, or the interval is).
    pub(super) fn file(&mut self) {
        for (kind, hist) in self.hists.iter_mut().enumerate() {
            if hist.is_empty() {
                continue;
            }
            let mut bytes = Vec::new();
            if V2DeflateSerializer::new()
                .serialize(hist, &mut bytes)
                .is_ok()
            {
                self.filed.push((self.at, kind, bytes));
            }
            hist.reset();
        }
    }
}

/// One interval's latencies, every thread's merged: over all its operations, and per type
/// (compressed, for the log).
#[derive(Debug, Clone, Default)]
pub struct IntervalLatency {
    /// Every operation's, in microseconds; `None` if none completed in the interval.
    pub all: Option<Latency>,
    /// Per operation type that had any: its name and compressed histogram (nanoseconds).
    pub by_type: Vec<(&'static str, Vec<u8>)>,
}

/// Merges what every thread filed into `count` intervals' latencies (what was filed for an
/// interval past the last is left out: the sampler kept no such interval).
pub(super) fn merge(
    filed: impl IntoIterator<Item = (u64, usize, Vec<u8>)>,
    count: usize,
) -> Result<Vec<IntervalLatency>, CliError> {
    let mut merged: Vec<Vec<Option<Histogram<u64>>>> = vec![vec![None; OP_NAMES.len()]; count];
    let mut deserializer = Deserializer::new();
    for (at, kind, bytes) in filed {
        let Some(slot) = merged.get_mut(at as usize).and_then(|m| m.get_mut(kind)) else {
            continue;
        };
        let hist: Histogram<u64> = deserializer
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| failed!("reading a filed latency histogram: {e:?}"))?;
        match slot {
            Some(total) => total
                .add(&hist)
                .map_err(|e| failed!("merging latency histograms: {e}"))?,
            None => *slot = Some(hist),
        }
    }
    merged
        .into_iter()
        .map(|types| {
            let mut all = latency_histogram()?;
            let mut by_type = Vec::new();
            for (kind, hist) in types.into_iter().enumerate() {
                let Some(hist) = hist else { continue };
                all.add(&hist)
                    .map_err(|e| failed!("merging latency histograms: {e}"))?;
                let mut bytes = Vec::new();
                V2DeflateSerializer::new()
                    .serialize(&hist, &mut bytes)
                    .map_err(|e| failed!("encoding a latency histogram: {e:?}"))?;
                by_type.push((OP_NAMES[kind], bytes));
            }
            Ok(IntervalLatency {
                all: (!all.is_empty()).then(|| Latency::of(&all)),
                by_type,
            })
        })
        .collect()
}

/// A compressed histogram filed here, read back.
pub(super) fn decode(bytes: &[u8]) -> Result<Histogram<u64>, CliError> {
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| failed!("reading a latency histogram: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filed(at: u64, kind: usize, values: &[u64]) -> (u64, usize, Vec<u8>) {
        let mut h = latency_histogram().expect("histogram");
        for &v in values {
            h.record(v).expect("record");
        }
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .expect("serialize");
        (at, kind, bytes)
    }

    #[test]
    fn what_threads_filed_merges_per_interval_and_type() {
        let merged = merge(
            [
                // Two threads' reads in interval 0, one's updates in 0, reads in 2, and a piece
                // past the last interval.
                filed(0, 0, &[1_000, 2_000]),
                filed(0, 0, &[3_000]),
                filed(0, 1, &[10_000]),
                filed(2, 0, &[5_000_000]),
                filed(3, 0, &[1]),
            ],
            3,
        )
        .expect("merge");
        assert_eq!(merged.len(), 3);
        let first = merged[0].all.as_ref().expect("interval 0 had operations");
        assert!((first.max - 10.0).abs() < 0.1, "{first:?}");
        assert!((first.p50 - 2.0).abs() < 0.01, "{first:?}");
        let names: Vec<&str> = merged[0].by_type.iter().map(|t| t.0).collect();
        assert_eq!(names, ["read", "update"]);
        let reads = decode(&merged[0].by_type[0].1).expect("decode");
        assert_eq!(reads.len(), 3);
        assert!(merged[1].all.is_none() && merged[1].by_type.is_empty());
        let third = merged[2].all.as_ref().expect("interval 2");
        assert!((third.p99 - 5_000.0).abs() < 5.0, "{third:?}");
    }
}
