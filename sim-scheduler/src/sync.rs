//! `std::sync` as a run sees it: every lock and every atomic operation is a sync point.
//!
//! Outside a run each type behaves exactly as its `std` namesake (one thread-local flag is
//! read first). Inside one, a lock that is held is waited for by yielding to the scheduler —
//! never by blocking the OS thread, which would stop the whole run — and a condition variable
//! waits in slices of virtual time (spurious wake-ups, which `std` permits too).

use std::ops::{Deref, DerefMut};
use std::time::Duration;

pub use std::sync::{Arc, LockResult, OnceLock, PoisonError, TryLockError, TryLockResult, Weak};

use crate::run::{is_simulated, point, sleep, yield_point};

/// A mutual-exclusion lock: `std::sync::Mutex`, whose `lock` is a sync point in a run.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized> {
    inner: std::sync::Mutex<T>,
}

/// The guard of a [`Mutex`].
#[derive(Debug)]
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    inner: Option<std::sync::MutexGuard<'a, T>>,
}

fn wrap<'a, T: ?Sized>(
    mutex: &'a Mutex<T>,
    result: LockResult<std::sync::MutexGuard<'a, T>>,
) -> LockResult<MutexGuard<'a, T>> {
    match result {
        Ok(inner) => Ok(MutexGuard {
            mutex,
            inner: Some(inner),
        }),
        Err(poisoned) => Err(PoisonError::new(MutexGuard {
            mutex,
            inner: Some(poisoned.into_inner()),
        })),
    }
}

impl<T> Mutex<T> {
    /// A new lock around `value`.
    pub const fn new(value: T) -> Self {
        Self {
            inner: std::sync::Mutex::new(value),
        }
    }

    /// The value, consuming the lock.
    pub fn into_inner(self) -> LockResult<T> {
        self.inner.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Acquires the lock (in a run, yields to the others while it is held).
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        if !is_simulated() {
            return wrap(self, self.inner.lock());
        }
        point();
        loop {
            match self.inner.try_lock() {
                Ok(inner) => return wrap(self, Ok(inner)),
                Err(TryLockError::Poisoned(poisoned)) => return wrap(self, Err(poisoned)),
                Err(TryLockError::WouldBlock) => yield_point(),
            }
        }
    }

    /// Acquires the lock if it is free.
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        point();
        match self.inner.try_lock() {
            Ok(inner) => Ok(MutexGuard {
                mutex: self,
                inner: Some(inner),
            }),
            Err(TryLockError::Poisoned(poisoned)) => {
                Err(TryLockError::Poisoned(PoisonError::new(MutexGuard {
                    mutex: self,
                    inner: Some(poisoned.into_inner()),
                })))
            }
            Err(TryLockError::WouldBlock) => Err(TryLockError::WouldBlock),
        }
    }

    /// The value, through a unique reference.
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        self.inner.get_mut()
    }

    /// Whether a holder panicked.
    pub fn is_poisoned(&self) -> bool {
        self.inner.is_poisoned()
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // `inner` is `None` only inside `Condvar::wait*`, which owns the guard meanwhile.
        self.inner
            .as_deref()
            .unwrap_or_else(|| unreachable!("a guard in use is held"))
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner
            .as_deref_mut()
            .unwrap_or_else(|| unreachable!("a guard in use is held"))
    }
}

/// Whether a timed wait timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// Whether the wait ended because its time ran out.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// How long a waiter sleeps between two looks at its condition, in a run.
const WAIT_SLICE: Duration = Duration::from_micros(50);

/// A condition variable: `std::sync::Condvar`; in a run, a wait releases the lock, sleeps a
/// slice of virtual time and takes it again.
#[derive(Debug, Default)]
pub struct Condvar {
    inner: std::sync::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub const fn new() -> Self {
        Self {
            inner: std::sync::Condvar::new(),
        }
    }

    /// Releases the lock, waits for a notification (or a spurious wake-up), retakes it.
    pub fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        let mutex = guard.mutex;
        let Some(inner) = guard.inner.take() else {
            return Ok(guard);
        };
        if !is_simulated() {
            return wrap(mutex, self.inner.wait(inner));
        }
        drop(inner);
        sleep(WAIT_SLICE);
        mutex.lock()
    }

    /// Waits while `condition` holds, at most `limit`.
    pub fn wait_timeout_while<'a, T, F: FnMut(&mut T) -> bool>(
        &self,
        mut guard: MutexGuard<'a, T>,
        limit: Duration,
        mut condition: F,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let mutex = guard.mutex;
        if !is_simulated() {
            let Some(inner) = guard.inner.take() else {
                return Ok((guard, WaitTimeoutResult(false)));
            };
            return match self.inner.wait_timeout_while(inner, limit, condition) {
                Ok((inner, r)) => Ok((
                    MutexGuard {
                        mutex,
                        inner: Some(inner),
                    },
                    WaitTimeoutResult(r.timed_out()),
                )),
                Err(poisoned) => {
                    let (inner, r) = poisoned.into_inner();
                    Err(PoisonError::new((
                        MutexGuard {
                            mutex,
                            inner: Some(inner),
                        },
                        WaitTimeoutResult(r.timed_out()),
                    )))
                }
            };
        }
        let deadline = crate::time::Instant::now() + limit;
        loop {
            if !condition(&mut *guard) {
                return Ok((guard, WaitTimeoutResult(false)));
            }
            let now = crate::time::Instant::now();
            if now >= deadline {
                return Ok((guard, WaitTimeoutResult(true)));
            }
            drop(guard);
            sleep(WAIT_SLICE.min(deadline - now));
            guard = mutex.lock().unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Wakes one waiter (in a run, waiters look again at their next slice).
    pub fn notify_one(&self) {
        self.inner.notify_one();
    }

    /// Wakes every waiter (in a run, waiters look again at their next slice).
    pub fn notify_all(&self) {
        self.inner.notify_all();
    }
}

/// `std::sync::atomic`, each operation a sync point in a run.
pub mod atomic {
    pub use std::sync::atomic::{Ordering, compiler_fence};

    use crate::run::point;

    /// A memory fence (a sync point in a run).
    pub fn fence(order: Ordering) {
        point();
        std::sync::atomic::fence(order);
    }

    /// The operations every atomic type has, each a sync point first.
    macro_rules! shared_ops {
        ($name:ident, $value:ty) => {
            /// A new atomic holding `v`.
            pub const fn new(v: $value) -> Self {
                Self(std::sync::atomic::$name::new(v))
            }
            /// See `std`.
            pub fn load(&self, order: Ordering) -> $value {
                point();
                self.0.load(order)
            }
            /// See `std`.
            pub fn store(&self, v: $value, order: Ordering) {
                point();
                self.0.store(v, order)
            }
            /// See `std`.
            pub fn swap(&self, v: $value, order: Ordering) -> $value {
                point();
                self.0.swap(v, order)
            }
            /// See `std`.
            pub fn compare_exchange(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                point();
                self.0.compare_exchange(current, new, success, failure)
            }
            /// See `std`. Never fails spuriously: a spurious failure would be a choice the seed
            /// does not make, and a replay could differ.
            pub fn compare_exchange_weak(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                point();
                self.0.compare_exchange(current, new, success, failure)
            }
            /// See `std`.
            pub fn fetch_or(&self, v: $value, order: Ordering) -> $value {
                point();
                self.0.fetch_or(v, order)
            }
            /// See `std`.
            pub fn fetch_and(&self, v: $value, order: Ordering) -> $value {
                point();
                self.0.fetch_and(v, order)
            }
            /// See `std`.
            pub fn get_mut(&mut self) -> &mut $value {
                self.0.get_mut()
            }
            /// See `std`.
            pub fn into_inner(self) -> $value {
                self.0.into_inner()
            }
        };
    }

    macro_rules! atomic_int {
        ($name:ident, $int:ty) => {
            #[doc = concat!("`std::sync::atomic::", stringify!($name), "`, each operation a sync point in a run.")]
            #[derive(Debug, Default)]
            #[repr(transparent)]
            pub struct $name(std::sync::atomic::$name);

            impl $name {
                shared_ops!($name, $int);

                /// See `std`.
                pub fn fetch_add(&self, v: $int, order: Ordering) -> $int {
                    point();
                    self.0.fetch_add(v, order)
                }
                /// See `std`.
                pub fn fetch_sub(&self, v: $int, order: Ordering) -> $int {
                    point();
                    self.0.fetch_sub(v, order)
                }
                /// See `std`.
                pub fn fetch_max(&self, v: $int, order: Ordering) -> $int {
                    point();
                    self.0.fetch_max(v, order)
                }
                /// See `std`.
                pub fn fetch_min(&self, v: $int, order: Ordering) -> $int {
                    point();
                    self.0.fetch_min(v, order)
                }
                /// See `std`.
                pub fn fetch_update<F: FnMut($int) -> Option<$int>>(
                    &self,
                    set: Ordering,
                    fetch: Ordering,
                    f: F,
                ) -> Result<$int, $int> {
                    point();
                    self.0.fetch_update(set, fetch, f)
                }
            }
        };
    }

    atomic_int!(AtomicU64, u64);
    atomic_int!(AtomicU32, u32);
    atomic_int!(AtomicUsize, usize);
    atomic_int!(AtomicI64, i64);

    /// `std::sync::atomic::AtomicBool`, each operation a sync point in a run.
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct AtomicBool(std::sync::atomic::AtomicBool);

    impl AtomicBool {
        shared_ops!(AtomicBool, bool);
    }
}
