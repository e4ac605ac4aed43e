//! Several key-value operations in flight on one thread: a [`Session`] over a set of [`Lane`]s
//! takes tagged [`Request`]s and gives back their [`Reply`]s as they complete.
//!
//! A lane is a client whose operations are futures and that runs one at a time (on a
//! disaggregated-memory index: its own queue pairs, and whatever state an operation keeps); a
//! session of `K` lanes keeps up to `K` operations in flight, the way RDMA systems run several
//! coroutines per thread. No runtime is involved: the session polls its operations' futures
//! itself, in a loop, and an operation's batch completes when its endpoint is polled.
//!
//! **Invariant.** A session is never dropped with an operation half done: dropping it finishes
//! every operation it started (but while its thread unwinds from a panic, when polling again
//! could abort the process) (an index's write stopped between its lock and its unlock would
//! leave a lock held). And it never holds more results than it has lanes: [`Session::submit`]
//! refuses work until results are taken.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

pub use rdma_transport::Stats;

/// One operation, as a [`Session`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// a GET.
    Get(u64),
    /// An insert (`Reply::Done(false)` if present).
    Insert(u64, u64),
    /// An update (`Reply::Done(false)` if absent).
    Update(u64, u64),
    /// An upsert (`Reply::Done(true)` if it inserted).
    Upsert(u64, u64),
    /// A delete (`Reply::Done(false)` if absent).
    Delete(u64),
    /// A scan: start key, most entries.
    Scan(u64, usize),
    /// A byte-value GET.
    GetValue(u64),
    /// A byte-value insert.
    InsertValue(u64, Vec<u8>),
    /// A byte-value update.
    UpdateValue(u64, Vec<u8>),
    /// A byte-value upsert.
    PutValue(u64, Vec<u8>),
    /// A byte-value scan: start key, most entries.
    ScanValues(u64, usize),
}

/// What a [`Request`] came back with (the variant its synchronous twin returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A GET's value.
    Value(Option<u64>),
    /// A write's outcome: whether it inserted, updated or deleted (as the synchronous call's
    /// `bool`).
    Done(bool),
    /// A scan's entries.
    Rows(Vec<(u64, u64)>),
    /// A byte-value GET's bytes.
    Bytes(Option<Vec<u8>>),
    /// A byte-value scan's entries.
    ValueRows(Vec<(u64, Vec<u8>)>),
}

/// A client a [`Session`] runs operations on, one at a time.
pub trait Lane {
    /// Why an operation failed.
    type Error;

    /// Runs `request`; pending while its batches are in flight.
    ///
    /// The future must be polled to its end: dropped half done, it may leave what the operation
    /// took (a remote lock whose CAS landed) to nobody. [`Session`] never drops one before it
    /// completes, and an index's own async face finishes an operation dropped early.
    fn run(&mut self, request: Request) -> impl Future<Output = Result<Reply, Self::Error>> + '_;

    /// The lane's network counters so far (its endpoint's): a session reads them before and
    /// after each operation, so each [`Done`] says what its operation cost.
    fn net_stats(&self) -> Stats;

    /// What a session does when none of its operations could go on: by default a spin hint
    /// (their batches complete by being polled); a lane whose operations wait on other threads
    /// under a scheduler that decides who runs yields there.
    fn idle() {
        std::hint::spin_loop();
    }
}

/// A session over `lanes`: see [`Session`].
pub fn session<'p, L: Lane + 'p, T: 'p>(lanes: &'p mut [L]) -> Session<'p, L, T> {
    let depth = lanes.len();
    Session {
        idle: lanes.iter_mut().collect(),
        running: Vec::with_capacity(depth),
        ready: VecDeque::new(),
    }
}

/// `K` lanes that one thread drives together: up to `K` operations in flight, through
/// [`Pipeline::session`]. An index makes one of its clients (for example `Store::pipeline`).
#[derive(Debug)]
pub struct Pipeline<L> {
    lanes: Vec<L>,
}

impl<L: Lane> Pipeline<L> {
    /// A pipeline of `lanes`.
    pub fn new(lanes: Vec<L>) -> Self {
        Self { lanes }
    }

    /// How many operations it runs at once.
    pub fn depth(&self) -> usize {
        self.lanes.len()
    }

    /// Its lanes (their counters).
    pub fn clients(&self) -> &[L] {
        &self.lanes
    }

    /// Its lanes, mutably (to reconnect one whose connection broke).
    pub fn clients_mut(&mut self) -> &mut [L] {
        &mut self.lanes
    }

    /// Gives the lanes back.
    pub fn into_clients(self) -> Vec<L> {
        self.lanes
    }

    /// A session over its lanes: submit tagged requests, take their results as they complete.
    pub fn session<'p, T: 'p>(&'p mut self) -> Session<'p, L, T>
    where
        L: 'p,
    {
        session(&mut self.lanes)
    }
}

/// What a lane's running operation gives back: the lane, the tag, the result.
type Finished<'p, L, T> = (&'p mut L, Done<T, <L as Lane>::Error>);

/// An operation that completed: its tag, its result, and what it cost on the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done<T, E> {
    /// The tag it was submitted with.
    pub tag: T,
    /// What it returned.
    pub result: Result<Reply, E>,
    /// The verbs, bytes and round trips it used (its lane's counters across it).
    pub net: Stats,
}

/// An operation running on a lane.
type Running<'p, L, T> = Pin<Box<dyn Future<Output = Finished<'p, L, T>> + 'p>>;

/// The operations in flight on a set of lanes ([`session`]): [`Session::submit`] starts one on a free client,
/// [`Session::poll`] and [`Session::wait`] move every one along and give back those that
/// completed, with their tags, in the order they completed.
///
/// ```
/// use std::collections::BTreeMap;
/// use kv_session::{Lane, Reply, Request};
///
/// /// A lane over a map in local memory: its operations are ready at once.
/// struct Local<'m>(&'m std::cell::RefCell<BTreeMap<u64, u64>>);
///
/// impl Lane for Local<'_> {
///     type Error = String;
///     async fn run(&mut self, request: Request) -> Result<Reply, String> {
///         let mut map = self.0.borrow_mut();
///         Ok(match request {
///             Request::Get(k) => Reply::Value(map.get(&k).copied()),
///             Request::Insert(k, v) => Reply::Done(map.insert(k, v).is_none()),
///             other => return Err(format!("not here: {other:?}")),
///         })
///     }
///     fn net_stats(&self) -> kv_session::Stats {
///         kv_session::Stats::default() // no network here
///     }
/// }
///
/// let map = std::cell::RefCell::new(BTreeMap::new());
/// let mut lanes = [Local(&map), Local(&map)];
/// let mut session = kv_session::session(&mut lanes);
/// let mut requests = (0..10u64).map(|k| (k, Request::Insert(k, k * 2)));
/// let mut inserted = 0;
/// loop {
///     // Keep every lane busy, then take one result.
///     while session.has_room() {
///         let Some((tag, request)) = requests.next() else { break };
///         session.submit(tag, request).expect("a lane is free");
///     }
///     let Some(done) = session.wait() else { break };
///     assert_eq!(done.result, Ok(Reply::Done(true)));
///     inserted += 1;
/// }
/// assert_eq!(inserted, 10);
/// ```
pub struct Session<'p, L: Lane, T> {
    idle: Vec<&'p mut L>,
    running: Vec<Running<'p, L, T>>,
    ready: VecDeque<Done<T, L::Error>>,
}

impl<L: Lane, T> std::fmt::Debug for Session<'_, L, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("idle", &self.idle.len())
            .field("running", &self.running.len())
            .field("ready", &self.ready.len())
            .finish()
    }
}

/// A request [`Session::submit`] could not start: every client is busy, or as many results as
/// the pipeline is deep wait to be taken. Take a result first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy<T> {
    /// The request's tag.
    pub tag: T,
    /// The request.
    pub request: Request,
}

impl<'p, L: Lane + 'p, T: 'p> Session<'p, L, T> {
    /// Starts `request` on a free client (it runs as far as its first batch), or gives it back
    /// if every client is busy.
    pub fn submit(&mut self, tag: T, request: Request) -> Result<(), Busy<T>> {
        if !self.has_room() {
            return Err(Busy { tag, request });
        }
        let Some(lane) = self.idle.pop() else {
            return Err(Busy { tag, request });
        };
        let mut running: Running<'p, L, T> = Box::pin(async move {
            let before = lane.net_stats();
            let result = lane.run(request).await;
            let net = lane.net_stats() - before;
            (lane, Done { tag, result, net })
        });
        // Started now: its first batch is posted before this returns.
        let mut cx = Context::from_waker(Waker::noop());
        match running.as_mut().poll(&mut cx) {
            Poll::Ready((lane, done)) => {
                self.give_back(lane, &done);
                self.ready.push_back(done);
            }
            Poll::Pending => self.running.push(running),
        }
        Ok(())
    }

    /// Whether a request can be submitted now: a client is free and fewer results than the
    /// pipeline's depth wait to be taken.
    pub fn has_room(&self) -> bool {
        !self.idle.is_empty() && self.in_flight() < self.running.len() + self.idle.len()
    }

    /// Operations started and not yet given back (results waiting in the session included).
    pub fn in_flight(&self) -> usize {
        self.running.len() + self.ready.len()
    }

    /// Moves every running operation along once; gives back one that completed, if any.
    pub fn poll(&mut self) -> Option<Done<T, L::Error>> {
        if self.ready.is_empty() {
            self.sweep();
        }
        self.ready.pop_front()
    }

    /// Moves the running operations along until one completes and gives it back; `None` if
    /// none is running.
    pub fn wait(&mut self) -> Option<Done<T, L::Error>> {
        loop {
            if let Some(done) = self.ready.pop_front() {
                return Some(done);
            }
            if self.running.is_empty() {
                return None;
            }
            if !self.sweep() {
                L::idle();
            }
        }
    }

    /// `lane` free again after `done`: taken next if its operation succeeded, last if it failed
    /// (a lane whose connection broke fails what it is given until its owner reconnects it, and
    /// must not take every request while the others stand idle).
    fn give_back(&mut self, lane: &'p mut L, done: &Done<T, L::Error>) {
        if done.result.is_ok() {
            self.idle.push(lane);
        } else {
            self.idle.insert(0, lane);
        }
    }

    /// Polls every running operation once; whether one completed.
    fn sweep(&mut self) -> bool {
        let before = self.ready.len();
        let mut at = 0;
        while at < self.running.len() {
            let mut cx = Context::from_waker(Waker::noop());
            match self.running[at].as_mut().poll(&mut cx) {
                Poll::Ready((lane, done)) => {
                    drop(self.running.swap_remove(at));
                    self.give_back(lane, &done);
                    self.ready.push_back(done);
                }
                Poll::Pending => at += 1,
            }
        }
        self.ready.len() > before
    }
}

impl<L: Lane, T> Drop for Session<'_, L, T> {
    /// Finishes every operation still running (an operation dropped half done could leave a
    /// leaf lock held); their results are dropped.
    fn drop(&mut self) {
        if std::thread::panicking() {
            // An operation that panicked cannot be polled again (that would abort the process):
            // what the others hold is left to their owners' recovery.
            return;
        }
        while !self.running.is_empty() {
            let mut at = 0;
            let mut progressed = false;
            while at < self.running.len() {
                let mut cx = Context::from_waker(Waker::noop());
                match self.running[at].as_mut().poll(&mut cx) {
                    Poll::Ready(_) => {
                        drop(self.running.swap_remove(at));
                        progressed = true;
                    }
                    Poll::Pending => at += 1,
                }
            }
            if !progressed {
                L::idle();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    use super::*;

    /// A lane whose operation on key `k` is pending `k` polls, then answers `Value(Some(k))`;
    /// it counts the operations that ran to their end.
    struct Slow {
        finished: Rc<Cell<u32>>,
        order: Order,
    }

    impl Lane for Slow {
        type Error = ();
        async fn run(&mut self, request: Request) -> Result<Reply, ()> {
            let Request::Get(k) = request else {
                return Err(());
            };
            pending_for(k).await;
            self.finished.set(self.finished.get() + 1);
            self.order.borrow_mut().push(k);
            Ok(Reply::Value(Some(k)))
        }
        fn net_stats(&self) -> Stats {
            Stats {
                batches: u64::from(self.finished.get()),
                ..Stats::default()
            }
        }
    }

    /// Pending for `polls` polls (asking each time to be polled again), then ready.
    async fn pending_for(polls: u64) {
        let mut left = polls;
        std::future::poll_fn(|cx| {
            if left == 0 {
                Poll::Ready(())
            } else {
                left -= 1;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await;
    }

    /// The order operations finished in, by key.
    type Order = Rc<RefCell<Vec<u64>>>;

    fn lanes(n: usize) -> (Vec<Slow>, Rc<Cell<u32>>, Order) {
        let finished = Rc::new(Cell::new(0));
        let order = Rc::new(RefCell::new(Vec::new()));
        let lanes = (0..n)
            .map(|_| Slow {
                finished: Rc::clone(&finished),
                order: Rc::clone(&order),
            })
            .collect();
        (lanes, finished, order)
    }

    #[test]
    fn results_come_back_as_operations_complete_and_submit_waits_for_a_free_lane() {
        let (mut lanes, _, order) = lanes(3);
        let mut session = session(&mut lanes);
        for (tag, k) in [(0, 9), (1, 1), (2, 4)] {
            session.submit(tag, Request::Get(k)).expect("a free lane");
        }
        assert!(!session.has_room());
        assert_eq!(
            session.submit(3, Request::Get(0)),
            Err(Busy {
                tag: 3,
                request: Request::Get(0)
            })
        );
        assert_eq!(session.in_flight(), 3);
        let got: Vec<u64> = std::iter::from_fn(|| session.wait().map(|done| done.tag)).collect();
        assert_eq!(got, [1, 2, 0], "the shortest operation first");
        assert_eq!(*order.borrow(), [1, 4, 9]);
        assert_eq!(session.wait(), None, "nothing in flight");
    }

    #[test]
    fn a_pipeline_runs_sessions_over_its_lanes_one_after_another() {
        let (lanes, finished, _) = lanes(3);
        let mut pipeline = Pipeline::new(lanes);
        assert_eq!(pipeline.depth(), 3);
        for round in 0..2u64 {
            let mut session = pipeline.session();
            for tag in 0..3 {
                session
                    .submit(tag, Request::Get(tag + round))
                    .expect("free");
            }
            assert!(!session.has_room(), "three lanes, three in flight");
            let mut tags: Vec<u64> =
                std::iter::from_fn(|| session.wait().map(|done| done.tag)).collect();
            tags.sort_unstable();
            assert_eq!(tags, [0, 1, 2]);
        }
        assert_eq!(finished.get(), 6);
        // Each lane's counters: every operation ran on one of them.
        let ran: u64 = pipeline
            .clients()
            .iter()
            .map(|l| l.net_stats().batches)
            .sum();
        assert_eq!(
            ran,
            3 * 6,
            "the lanes share one counter here: three reads of six"
        );
        assert_eq!(pipeline.into_clients().len(), 3);
    }

    #[test]
    fn results_not_taken_hold_the_session_back() {
        let (mut lanes, _, _) = lanes(2);
        let mut session = session(&mut lanes);
        // Ready at once: the lane is free again, but its result waits to be taken.
        session.submit(0, Request::Get(0)).expect("free");
        session.submit(1, Request::Get(0)).expect("free");
        assert!(!session.has_room(), "two results wait: no room for a third");
        assert!(session.poll().is_some());
        assert!(session.has_room());
    }

    #[test]
    fn a_dropped_session_finishes_what_it_started() {
        let (mut lanes, finished, _) = lanes(4);
        {
            let mut session = session(&mut lanes);
            for tag in 0..4 {
                session.submit(tag, Request::Get(5 + tag)).expect("free");
            }
            assert!(session.poll().is_none());
        }
        assert_eq!(finished.get(), 4);
    }

    /// A lane that answers with its own number, or fails (`bad`); a GET of 13 panics once it has
    /// been pending.
    struct Numbered {
        id: u64,
        bad: bool,
    }

    impl Lane for Numbered {
        type Error = u64;
        async fn run(&mut self, request: Request) -> Result<Reply, u64> {
            if let Request::Get(k) = request {
                pending_for(k).await;
                if k == 13 {
                    panic!("a lane's operation panicked");
                }
            }
            if self.bad {
                Err(self.id)
            } else {
                Ok(Reply::Value(Some(self.id)))
            }
        }
        fn net_stats(&self) -> Stats {
            Stats::default()
        }
    }

    #[test]
    fn a_lane_whose_operation_failed_is_taken_last() {
        let mut lanes = [
            Numbered { id: 0, bad: false },
            Numbered { id: 1, bad: true },
        ];
        let mut session = session(&mut lanes);
        // The failing lane first (the last lane is taken first), then only the good one.
        session.submit(0, Request::Get(0)).expect("free");
        assert_eq!(session.wait().map(|d| d.result), Some(Err(1)));
        for tag in 1..5 {
            session.submit(tag, Request::Get(0)).expect("free");
            assert_eq!(
                session.wait().map(|d| d.result),
                Some(Ok(Reply::Value(Some(0)))),
                "request {tag} went to the lane that failed"
            );
        }
    }

    #[test]
    fn a_session_dropped_while_its_thread_unwinds_polls_nothing_more() {
        let mut lanes = [
            Numbered { id: 0, bad: false },
            Numbered { id: 1, bad: false },
        ];
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut session = session(&mut lanes);
            session.submit(0, Request::Get(50)).expect("free");
            session.submit(1, Request::Get(13)).expect("free");
            // The second panics in a later poll, inside `wait`: the session drops while
            // unwinding, with the panicked future among its running ones.
            while session.wait().is_some() {}
        }));
        assert!(
            outcome.is_err(),
            "the lane's panic reaches the caller, and nothing aborts"
        );
    }
}
