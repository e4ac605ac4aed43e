//! Workloads: operation mixes (YCSB A–F and friends), YCSB property files, request distributions.

use std::path::Path;

use rand::Rng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Zipf};

/// A named workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// 50% reads, 50% updates.
    YcsbA,
    /// 95% reads, 5% updates.
    YcsbB,
    /// 100% reads.
    YcsbC,
    /// 95% reads, 5% inserts; reads favour the latest keys.
    YcsbD,
    /// 95% scans (1–100 keys), 5% inserts.
    YcsbE,
    /// 50% reads, 50% read-modify-writes.
    YcsbF,
    /// 100% inserts.
    InsertOnly,
    /// 50% reads, 50% inserts.
    Write50,
    /// A steady key count: each operation deletes a random existing key or inserts a new one,
    /// 50/50 (each client thread deletes only keys it owns: a share of the loaded keys and its
    /// own inserts, so every delete finds its key).
    Churn,
}

impl Workload {
    /// YCSB's core workloads, A to F.
    pub const YCSB: [Workload; 6] = [
        Workload::YcsbA,
        Workload::YcsbB,
        Workload::YcsbC,
        Workload::YcsbD,
        Workload::YcsbE,
        Workload::YcsbF,
    ];
}

/// A workload's or request distribution's name, as on the command line and in reports.
pub fn name(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The request distribution over existing keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestDist {
    /// Every key equally likely.
    Uniform,
    /// Zipfian with exponent θ over a scrambled key order (hot keys spread over the key space).
    Zipfian,
    /// Zipfian over recency: the most recently inserted keys are the hottest.
    Latest,
    /// YCSB's hot spot: a share of the operations (`hotspotopnfraction`, 0.8) go to a share of
    /// the keys (`hotspotdatafraction`, 0.2, the first ones), uniformly; the rest to the others.
    Hotspot,
    /// YCSB's exponential over recency: 95% of the requests (`exponential.percentile`) go to
    /// the newest 85.7% of the keys (`exponential.frac`).
    Exponential,
}

/// The parameters of the hot-spot and exponential distributions (YCSB's names and defaults).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DistParams {
    pub hotspot_data_fraction: f64,
    pub hotspot_op_fraction: f64,
    pub exponential_percentile: f64,
    pub exponential_frac: f64,
}

impl Default for DistParams {
    fn default() -> Self {
        Self {
            hotspot_data_fraction: 0.2,
            hotspot_op_fraction: 0.8,
            exponential_percentile: 95.0,
            exponential_frac: 0.857_142_857_1,
        }
    }
}

/// Operation proportions (summing to 1) and scan lengths.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mix {
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub read_modify_write: f64,
    pub max_scan_length: u64,
    pub request_dist: RequestDist,
    /// The hot-spot and exponential distributions' parameters.
    pub dist_params: DistParams,
}

impl Workload {
    /// The mix and YCSB's default request distribution.
    pub fn mix(self) -> Mix {
        let (read, update, insert, scan, rmw, dist) = match self {
            Workload::YcsbA => (0.5, 0.5, 0.0, 0.0, 0.0, RequestDist::Zipfian),
            Workload::YcsbB => (0.95, 0.05, 0.0, 0.0, 0.0, RequestDist::Zipfian),
            Workload::YcsbC => (1.0, 0.0, 0.0, 0.0, 0.0, RequestDist::Zipfian),
            Workload::YcsbD => (0.95, 0.0, 0.05, 0.0, 0.0, RequestDist::Latest),
            Workload::YcsbE => (0.0, 0.0, 0.05, 0.95, 0.0, RequestDist::Zipfian),
            Workload::YcsbF => (0.5, 0.0, 0.0, 0.0, 0.5, RequestDist::Zipfian),
            Workload::InsertOnly => (0.0, 0.0, 1.0, 0.0, 0.0, RequestDist::Uniform),
            Workload::Write50 => (0.5, 0.0, 0.5, 0.0, 0.0, RequestDist::Zipfian),
            // Inserts only here: the bench loop turns half of a churn run into deletes.
            Workload::Churn => (0.0, 0.0, 1.0, 0.0, 0.0, RequestDist::Uniform),
        };
        Mix {
            read,
            update,
            insert,
            scan,
            read_modify_write: rmw,
            max_scan_length: 100,
            request_dist: dist,
            dist_params: DistParams::default(),
        }
    }
}

/// Every property [`read_property_file`] reads (the others a file may hold are ignored).
pub const PROPERTIES: [&str; 21] = [
    "recordcount",
    "operationcount",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "requestdistribution",
    "maxscanlength",
    "scanlengthdistribution",
    "zipfianconstant",
    "insertorder",
    "insertstart",
    "insertcount",
    "fieldcount",
    "fieldlength",
    "fieldlengthdistribution",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "exponential.percentile",
    "exponential.frac",
];

/// What a YCSB property file sets.
#[derive(Debug, Clone, PartialEq)]
pub struct PropertyFile {
    pub record_count: Option<u64>,
    pub operation_count: Option<u64>,
    pub mix: Mix,
    /// `zipfianconstant`: the zipfian θ.
    pub theta: Option<f64>,
    /// `insertorder`: `ordered` is [`crate::keys::InsertOrder::Append`], `hashed` is `Random`.
    pub insert_order: Option<crate::keys::InsertOrder>,
    /// The record size, stored as a byte value: `fieldcount` × `fieldlength` (YCSB's defaults,
    /// 10 and 100, for those not given: 1,000-byte records), each field's length drawn as
    /// `fieldlengthdistribution` says (constant; uniform in 1..=fieldlength).
    pub record: crate::checks::ValueSize,
    /// How the record size came about, for the report (`fieldcount 10 x fieldlength 100
    /// (YCSB's defaults)`).
    pub record_source: String,
    /// `insertstart` and `insertcount`, where given (a YCSB client loading a share of the keys):
    /// the bench loads every key in one process, so only `insertstart` 0 and `insertcount` equal
    /// to the keys loaded run (see [`PropertyFile::check_insert_range`]).
    pub insert_start: Option<u64>,
    pub insert_count: Option<u64>,
}

impl PropertyFile {
    /// Refuses `insertstart`/`insertcount` that ask for a share of the `keys` loaded (as
    /// several YCSB clients split a load): one bench process loads them all.
    pub fn check_insert_range(&self, path: &Path, keys: u64) -> Result<(), String> {
        let start = self.insert_start.unwrap_or(0);
        let count = self.insert_count.unwrap_or(keys.saturating_sub(start));
        if start == 0 && count == keys {
            return Ok(());
        }
        Err(format!(
            "--workload-file {}: insertstart {start} and insertcount {count} load a share of the {keys} keys, as several YCSB clients split a load; rolex bench loads every key in one process (insertstart 0, insertcount {keys}, or neither)",
            path.display()
        ))
    }
}

/// Parses a YCSB workload property file (`key=value` lines, `#` comments): `recordcount`,
/// `operationcount`, `readproportion`, `updateproportion`, `insertproportion`,
/// `scanproportion`, `readmodifywriteproportion`, `requestdistribution`
/// (uniform, zipfian, latest), `maxscanlength`, `zipfianconstant`, `insertorder` (hashed,
/// ordered), `scanlengthdistribution` (uniform only: another is refused), and `fieldcount` and
/// `fieldlength` (their product is the record size, stored as a byte value). Unknown keys are
/// ignored, as YCSB does; malformed values and proportions that do not sum to 1 are errors.
///
/// `overrides` are `-p KEY=VALUE`s, read after the file's lines, so they win, as YCSB's `-p` over
/// its `-P` file; a key among them that this list does not name is refused (on the command line,
/// a property read by nobody is a mistake, not a file's leftover).
pub fn read_property_file(path: &Path, overrides: &[String]) -> Result<PropertyFile, String> {
    let what = format!("--workload-file {}", path.display());
    let bytes = crate::checks::read_at_most(path, crate::checks::MAX_WORKLOAD_FILE_BYTES, &what)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        format!("{what}: not a text file (a YCSB property file is key=value lines)")
    })?;
    for o in overrides {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k.trim());
        if !PROPERTIES.contains(&key) {
            return Err(format!(
                "-p {o}: rolex bench reads no property {key:?} (it reads {})",
                PROPERTIES.join(", ")
            ));
        }
    }
    let lines = text
        .lines()
        .enumerate()
        .map(|(n, line)| (format!("{}:{}", path.display(), n + 1), line))
        .chain(overrides.iter().map(|o| (format!("-p {o}"), o.as_str())));
    let mut mix = Mix {
        read: 0.0,
        update: 0.0,
        insert: 0.0,
        scan: 0.0,
        read_modify_write: 0.0,
        max_scan_length: 100,
        request_dist: RequestDist::Zipfian,
        dist_params: DistParams::default(),
    };
    let (mut records, mut operations) = (None, None);
    let (mut theta, mut insert_order) = (None, None);
    let (mut field_count, mut field_length) = (None, None);
    let mut uniform_fields = false;
    let (mut insert_start, mut insert_count) = (None, None);
    for (place, line) in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let where_ = || place.clone();
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("{}: expected key=value", where_()))?;
        let (key, value) = (key.trim(), value.trim());
        let number = || {
            value
                .parse::<f64>()
                .map_err(|e| format!("{}: {key}: {e}", where_()))
        };
        let count = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{}: {key}: {e}", where_()))
        };
        match key {
            "recordcount" => records = Some(count()?),
            "operationcount" => operations = Some(count()?),
            "readproportion" => mix.read = number()?,
            "updateproportion" => mix.update = number()?,
            "insertproportion" => mix.insert = number()?,
            "scanproportion" => mix.scan = number()?,
            "readmodifywriteproportion" => mix.read_modify_write = number()?,
            "maxscanlength" => {
                mix.max_scan_length = count()?;
                if mix.max_scan_length == 0 {
                    return Err(format!(
                        "{}: maxscanlength must be at least 1 (a scan reads 1 to maxscanlength keys)",
                        where_()
                    ));
                }
            }
            "hotspotdatafraction" | "hotspotopnfraction" => {
                let f = number()?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(format!("{}: {key} must lie in [0, 1]", where_()));
                }
                if key == "hotspotdatafraction" {
                    mix.dist_params.hotspot_data_fraction = f;
                } else {
                    mix.dist_params.hotspot_op_fraction = f;
                }
            }
            "exponential.percentile" => {
                let p = number()?;
                if !(p > 0.0 && p < 100.0) {
                    return Err(format!("{}: {key} must lie in (0, 100)", where_()));
                }
                mix.dist_params.exponential_percentile = p;
            }
            "exponential.frac" => {
                let f = number()?;
                if !(f > 0.0 && f <= 1.0) {
                    return Err(format!("{}: {key} must lie in (0, 1]", where_()));
                }
                mix.dist_params.exponential_frac = f;
            }
            "fieldcount" => field_count = Some(count()?),
            "fieldlength" => field_length = Some(count()?),
            "fieldlengthdistribution" => {
                uniform_fields = match value {
                    "constant" => false,
                    "uniform" => true,
                    other => {
                        return Err(format!(
                            "{}: fieldlengthdistribution {other:?} is not supported (constant, or uniform: each field 1..=fieldlength bytes)",
                            where_()
                        ));
                    }
                }
            }
            "insertstart" => insert_start = Some(count()?),
            "insertcount" => insert_count = Some(count()?),
            "zipfianconstant" => {
                let t = number()?;
                if !(t.is_finite() && t > 0.0) {
                    return Err(format!("{}: zipfianconstant must be above 0", where_()));
                }
                theta = Some(t);
            }
            "insertorder" => {
                insert_order = Some(match value {
                    "hashed" => crate::keys::InsertOrder::Random,
                    "ordered" => crate::keys::InsertOrder::Append,
                    other => {
                        return Err(format!(
                            "{}: unknown insertorder {other:?} (hashed or ordered)",
                            where_()
                        ));
                    }
                })
            }
            "scanlengthdistribution" if value != "uniform" => {
                return Err(format!(
                    "{}: scanlengthdistribution {value:?} is not supported (scan lengths are uniform in 1..=maxscanlength)",
                    where_()
                ));
            }
            "requestdistribution" => {
                mix.request_dist = match value {
                    "uniform" => RequestDist::Uniform,
                    "zipfian" => RequestDist::Zipfian,
                    "latest" => RequestDist::Latest,
                    "hotspot" => RequestDist::Hotspot,
                    "exponential" => RequestDist::Exponential,
                    other => {
                        return Err(format!(
                            "{}: unknown requestdistribution {other:?}",
                            where_()
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    let parts = [
        mix.read,
        mix.update,
        mix.insert,
        mix.scan,
        mix.read_modify_write,
    ];
    if parts.iter().any(|p| !(0.0..=1.0).contains(p))
        || (parts.iter().sum::<f64>() - 1.0).abs() > 1e-6
    {
        return Err(format!(
            "{}: operation proportions must lie in [0, 1] and sum to 1",
            path.display()
        ));
    }
    let (fields, length) = (field_count.unwrap_or(10), field_length.unwrap_or(100));
    let bytes = fields.saturating_mul(length);
    if bytes > leaf_store::value::MAX_VALUE_LEN {
        return Err(format!(
            "{}: fieldcount x fieldlength is {bytes} bytes; a record is at most {} (64 KiB)",
            path.display(),
            leaf_store::value::MAX_VALUE_LEN
        ));
    }
    let defaults = match (field_count, field_length) {
        (None, None) => ", YCSB's defaults",
        (None, Some(_)) => ", fieldcount YCSB's default",
        (Some(_), None) => ", fieldlength YCSB's default",
        (Some(_), Some(_)) => "",
    };
    let (record, record_source) = if uniform_fields {
        // Each field 1..=fieldlength bytes (YCSB's uniform field lengths): records from one
        // byte a field to the full length, uniform between.
        (
            crate::checks::ValueSize {
                min: fields.min(bytes),
                max: bytes,
            },
            format!("fieldcount {fields} x fieldlength 1..={length} drawn uniformly{defaults}"),
        )
    } else {
        (
            crate::checks::ValueSize {
                min: bytes,
                max: bytes,
            },
            format!("fieldcount {fields} x fieldlength {length}{defaults}"),
        )
    };
    Ok(PropertyFile {
        record_count: records,
        operation_count: operations,
        mix,
        theta,
        insert_order,
        record,
        record_source,
        insert_start,
        insert_count,
    })
}

/// One operation to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read(u64),
    Update(u64),
    Insert(u64),
    Scan(u64, usize),
    ReadModifyWrite(u64),
    Delete(u64),
}

/// Chooses existing keys by the request distribution.
#[derive(Debug)]
pub struct Chooser {
    dist: RequestDist,
    zipf: Option<Zipf<f64>>,
    n: u64,
    params: DistParams,
}

impl Chooser {
    /// A chooser over `n` keys (θ for zipfian and latest), with YCSB's default parameters.
    #[cfg(test)]
    pub fn new(dist: RequestDist, n: u64, theta: f64) -> Result<Self, String> {
        Self::with_params(dist, n, theta, DistParams::default())
    }

    /// A chooser over `n` keys with the hot-spot and exponential parameters `params`.
    pub fn with_params(
        dist: RequestDist,
        n: u64,
        theta: f64,
        params: DistParams,
    ) -> Result<Self, String> {
        let zipf = match dist {
            RequestDist::Zipfian | RequestDist::Latest => Some(
                Zipf::new(n.max(1) as f64, theta)
                    .map_err(|e| format!("zipfian θ = {theta}: {e}"))?,
            ),
            _ => None,
        };
        Ok(Self {
            dist,
            zipf,
            n: n.max(1),
            params,
        })
    }

    /// An index into the live keys (`live ≥ 1`: loaded keys first, then inserted ones in order).
    pub fn pick(&self, rng: &mut StdRng, live: u64) -> u64 {
        let live = live.max(1);
        match (self.dist, &self.zipf) {
            (RequestDist::Hotspot, _) => {
                let p = self.params;
                let hot = ((live as f64 * p.hotspot_data_fraction) as u64).clamp(1, live);
                if hot == live || rng.random::<f64>() < p.hotspot_op_fraction {
                    rng.random_range(0..hot)
                } else {
                    rng.random_range(hot..live)
                }
            }
            (RequestDist::Exponential, _) => {
                // YCSB's ExponentialGenerator over the keys counted from the newest.
                let p = self.params;
                let gamma = -(1.0 - p.exponential_percentile / 100.0).ln()
                    / (self.n as f64 * p.exponential_frac);
                let mut back = live;
                for _ in 0..32 {
                    let u: f64 = rng.random();
                    back = (-(1.0 - u).ln() / gamma) as u64;
                    if back < live {
                        break;
                    }
                }
                live - 1 - back % live
            }
            (RequestDist::Uniform, _) | (_, None) => rng.random_range(0..live),
            (RequestDist::Zipfian, Some(z)) => {
                let rank = (z.sample(rng) as u64).saturating_sub(1).min(self.n - 1);
                // Scramble so the hot keys are spread over the key space, as YCSB does.
                rank.wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.n.min(live)
            }
            (RequestDist::Latest, Some(z)) => {
                let rank = (z.sample(rng) as u64).saturating_sub(1);
                live - 1 - rank.min(live - 1)
            }
        }
    }
}

impl Mix {
    /// The next operation's kind and key, choosing among `live` keys.
    pub fn next(
        &self,
        rng: &mut StdRng,
        chooser: &Chooser,
        live: u64,
        key_at: impl Fn(u64) -> u64,
        new_key: impl FnOnce() -> u64,
    ) -> Op {
        let x: f64 = rng.random();
        let existing = |rng: &mut StdRng| key_at(chooser.pick(rng, live));
        if x < self.read {
            Op::Read(existing(rng))
        } else if x < self.read + self.update {
            Op::Update(existing(rng))
        } else if x < self.read + self.update + self.insert {
            Op::Insert(new_key())
        } else if x < self.read + self.update + self.insert + self.scan {
            let len = rng.random_range(1..=self.max_scan_length) as usize;
            Op::Scan(existing(rng), len)
        } else {
            Op::ReadModifyWrite(existing(rng))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn hotspot_and_exponential_follow_ycsb() {
        let mut rng = StdRng::seed_from_u64(5);
        let n = 10_000u64;
        let hot = Chooser::new(RequestDist::Hotspot, n, 0.99).expect("chooser");
        let in_hot = (0..20_000)
            .filter(|_| hot.pick(&mut rng, n) < n / 5)
            .count() as f64
            / 20_000.0;
        assert!(
            (0.78..0.82).contains(&in_hot),
            "{in_hot} of requests in the hot fifth"
        );
        let exp = Chooser::new(RequestDist::Exponential, n, 0.99).expect("chooser");
        let picks: Vec<u64> = (0..20_000).map(|_| exp.pick(&mut rng, n)).collect();
        assert!(picks.iter().all(|&p| p < n));
        // 95% of the draws fall within the newest 85.7% of the keys; draws past the oldest key
        // are drawn again (as YCSB does), so 0.95 / (1 - 0.05^(1/0.857)) = 98% of the requests.
        let newest = picks
            .iter()
            .filter(|&&p| p >= n - (n as f64 * 0.857) as u64)
            .count() as f64
            / 20_000.0;
        assert!((0.97..0.99).contains(&newest), "{newest}");
        // The newest keys are the most requested.
        let last_tenth = picks.iter().filter(|&&p| p >= n - n / 10).count();
        let first_tenth = picks.iter().filter(|&&p| p < n / 10).count();
        assert!(
            last_tenth > 3 * first_tenth,
            "{last_tenth} vs {first_tenth}"
        );
    }

    #[test]
    fn property_files_parse_and_bad_ones_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("workloada");
        std::fs::write(&good, "# YCSB A\nrecordcount=1000\noperationcount=5000\nreadproportion=0.5\nupdateproportion=0.5\nrequestdistribution=uniform\nworkload=site.ycsb.workloads.CoreWorkload\n").expect("write");
        let p = read_property_file(&good, &[]).expect("parse");
        assert_eq!(
            (p.record_count, p.operation_count),
            (Some(1000), Some(5000))
        );
        assert_eq!(
            (p.mix.read, p.mix.update, p.mix.request_dist),
            (0.5, 0.5, RequestDist::Uniform)
        );
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "readproportion=0.7\nupdateproportion=0.5\n").expect("write");
        assert!(
            read_property_file(&bad, &[])
                .unwrap_err()
                .contains("sum to 1")
        );
        std::fs::write(&bad, "readproportion=lots\n").expect("write");
        assert!(
            read_property_file(&bad, &[])
                .unwrap_err()
                .contains("readproportion")
        );
        std::fs::write(&bad, "requestdistribution=pareto\nreadproportion=1\n").expect("write");
        assert!(
            read_property_file(&bad, &[])
                .unwrap_err()
                .contains("pareto")
        );
        std::fs::write(
            &bad,
            "requestdistribution=hotspot\nhotspotdatafraction=1.5\nreadproportion=1\n",
        )
        .expect("write");
        assert!(
            read_property_file(&bad, &[])
                .unwrap_err()
                .contains("hotspotdatafraction")
        );
        assert!(read_property_file(&dir.path().join("missing"), &[]).is_err());
    }

    #[test]
    fn a_p_override_wins_over_the_file_and_a_property_nobody_reads_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("workloada");
        std::fs::write(
            &file,
            "operationcount=5000\nreadproportion=0.5\nupdateproportion=0.5\nrequestdistribution=zipfian\nreadallfields=true\n",
        )
        .expect("write");
        let overrides = [
            "requestdistribution=uniform".to_string(),
            "operationcount = 700".to_string(),
            "readproportion=0.9".to_string(),
            "updateproportion=0.1".to_string(),
        ];
        let p = read_property_file(&file, &overrides).expect("parse");
        assert_eq!(p.operation_count, Some(700));
        assert_eq!(
            (p.mix.read, p.mix.update, p.mix.request_dist),
            (0.9, 0.1, RequestDist::Uniform)
        );
        // The file's readallfields is ignored, as YCSB's own unknown keys are; on the command
        // line it is refused, naming it.
        let e = read_property_file(&file, &["readallfields=false".into()]).unwrap_err();
        assert!(
            e.contains("-p readallfields=false") && e.contains("\"readallfields\""),
            "{e}"
        );
        // A bad value names the -p it came from.
        let e = read_property_file(&file, &["operationcount=many".into()]).unwrap_err();
        assert!(
            e.starts_with("-p operationcount=many: operationcount"),
            "{e}"
        );
    }

    #[test]
    fn mixes_follow_their_proportions() {
        let mut rng = StdRng::seed_from_u64(1);
        let mix = Workload::YcsbB.mix();
        let chooser = Chooser::new(mix.request_dist, 1000, 0.99).expect("chooser");
        let mut counts = [0u32; 5];
        for _ in 0..100_000 {
            let i = match mix.next(&mut rng, &chooser, 1000, |i| i, || 0) {
                Op::Read(_) => 0,
                Op::Update(_) => 1,
                Op::Insert(_) => 2,
                Op::Scan(..) => 3,
                Op::ReadModifyWrite(_) => 4,
                Op::Delete(_) => unreachable!("mixes issue no deletes"),
            };
            counts[i] += 1;
        }
        assert!(
            (94_000..96_000).contains(&counts[0]) && (4_000..6_000).contains(&counts[1]),
            "{counts:?}"
        );
    }

    #[test]
    fn zipfian_is_skewed_and_latest_favours_recent_keys() {
        let mut rng = StdRng::seed_from_u64(2);
        let z = Chooser::new(RequestDist::Zipfian, 10_000, 0.99).expect("chooser");
        let mut hits = std::collections::HashMap::new();
        for _ in 0..100_000 {
            *hits.entry(z.pick(&mut rng, 10_000)).or_insert(0u32) += 1;
        }
        let top = hits.values().max().copied().unwrap_or(0);
        assert!(
            top > 5_000,
            "the hottest key got only {top} of 100,000 picks"
        );
        let latest = Chooser::new(RequestDist::Latest, 10_000, 0.99).expect("chooser");
        let recent = (0..10_000)
            .filter(|_| latest.pick(&mut rng, 10_000) >= 9_000)
            .count();
        assert!(
            recent > 5_000,
            "only {recent} of 10,000 latest picks were among the newest 10%"
        );
    }
}
