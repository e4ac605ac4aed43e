//! `std::time` as a run sees it: `Instant::now` reads the run's virtual clock.

use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::sync::OnceLock;
pub use std::time::Duration;

/// `std::time::Instant`; in a run, a moment of the run's virtual clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(std::time::Instant);

/// The real moment virtual time 0 of every run maps to.
fn origin() -> std::time::Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(std::time::Instant::now)
}

impl Instant {
    /// Now (in a run, on its virtual clock).
    pub fn now() -> Self {
        match crate::run::now_nanos() {
            Some(nanos) => Self(origin() + Duration::from_nanos(nanos)),
            None => Self(std::time::Instant::now()),
        }
    }

    /// Time since `self` (zero if `self` is later).
    pub fn elapsed(&self) -> Duration {
        Self::now().0.saturating_duration_since(self.0)
    }

    /// Time from `earlier` to `self` (zero if `earlier` is later).
    pub fn duration_since(&self, earlier: Self) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }

    /// Time from `earlier` to `self` (zero if `earlier` is later).
    pub fn saturating_duration_since(&self, earlier: Self) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }

    /// `self + d`, if representable.
    pub fn checked_add(&self, d: Duration) -> Option<Self> {
        self.0.checked_add(d).map(Self)
    }

    /// `self - d`, if representable.
    pub fn checked_sub(&self, d: Duration) -> Option<Self> {
        self.0.checked_sub(d).map(Self)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0 + d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        self.0 += d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0 - d)
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, d: Duration) {
        self.0 -= d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }
}
