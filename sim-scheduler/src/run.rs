//! A run: its threads, which one holds the baton, virtual time, and the choice of the next.
//!
//! Invariant: while a run is live, at most one of its threads executes its own code — the one
//! `State::running` names; every other thread of the run waits on its own condition variable
//! until it is named. The running thread gives the baton away only at a *sync point*
//! ([`point`]), where the strategy, fed by the run's seed, picks the next thread among the
//! runnable ones. So a run is a pure function of its seed and of what its threads do between
//! sync points, which is what makes a failing schedule replayable.
//!
//! Virtual time advances by [`Config::step_cost`] at every sync point, and jumps forward when
//! every thread sleeps (or belongs to a paused group): a thread sleeping for a second costs no
//! wall-clock time, and "paused past its lease" is a decision of the scheduler.
//!
//! A run stops — every remaining thread unwinds with a private payload at its next sync point —
//! when its first thread returns, when a thread panics, when no thread can run any more
//! (deadlock), or when it exceeds [`Config::max_steps`] (a livelock, or a stall).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::strategy::{Rng, Strategy, StrategyState};

/// How a run is scheduled.
#[derive(Debug, Clone)]
pub struct Config {
    /// Every choice of the run (and [`random_u64`]) comes from this seed.
    pub seed: u64,
    /// How the next thread is chosen at a sync point.
    pub strategy: Strategy,
    /// Virtual time one sync point costs (about a verb's round trip).
    pub step_cost: Duration,
    /// Sync points after which the run is stopped and reported as [`Outcome::StepLimit`].
    pub max_steps: u64,
    /// Wall-clock time without a single sync point after which the run is reported as
    /// [`Outcome::Hung`] (a thread blocked outside the scheduler).
    pub stall_limit: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            seed: 1,
            strategy: Strategy::Random,
            step_cost: Duration::from_micros(2),
            max_steps: 10_000_000,
            stall_limit: Duration::from_secs(60),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The first thread returned (threads still running then were stopped).
    Finished,
    /// A thread panicked: its name and message.
    Panicked {
        /// The thread's name.
        thread: String,
        /// The panic message.
        message: String,
    },
    /// No thread could run any more: each waits to join another.
    Deadlock(String),
    /// The run took more than [`Config::max_steps`] sync points.
    StepLimit,
    /// No sync point for [`Config::stall_limit`] of wall-clock time: a thread blocked outside
    /// the scheduler (its threads are left behind).
    Hung(String),
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// How it ended.
    pub outcome: Outcome,
    /// Sync points passed.
    pub steps: u64,
    /// Times the baton went to another thread.
    pub switches: u64,
    /// Threads the run had, the first included.
    pub threads: usize,
    /// Virtual time at the end.
    pub virtual_time: Duration,
    /// A digest of every choice made: two runs of one seed that made the same choices (which a
    /// deterministic system does) have the same digest.
    pub trace: u64,
    /// The named [`step`]s at which a [`pause_at_step`] plan stopped a group, in order.
    pub paused_at: Vec<&'static str>,
    /// Every named [`step`] the run's threads passed, with how often (a campaign's coverage:
    /// a step never met is a protocol path no fault can land in).
    pub steps_met: BTreeMap<&'static str, u64>,
}

/// A group of threads that can be paused together (a simulated process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Group(pub(crate) usize);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Runnable,
    Sleeping(u64),
    Joining(usize),
    Done,
}

#[derive(Debug)]
struct Task {
    name: String,
    status: Status,
    group: usize,
    priority: u64,
    /// Virtual nanoseconds it asked to sleep, in all.
    slept: u64,
    wake: Arc<Condvar>,
}

#[derive(Debug)]
pub(crate) struct State {
    tasks: Vec<Task>,
    running: usize,
    now: u64,
    step_cost: u64,
    max_steps: u64,
    rng: Rng,
    strategy: StrategyState,
    steps: u64,
    switches: u64,
    paused_until: Vec<u64>,
    /// Armed [`pause_at_step`] plans of groups.
    step_plans: Vec<StepPlan>,
    /// The named steps at which a planned pause stopped a group, in order.
    paused_at: Vec<&'static str>,
    /// Every named step passed, with how often.
    steps_met: BTreeMap<&'static str, u64>,
    /// What the system under test told the run of what it holds (see [`crate::ghost`]).
    ghost: crate::ghost::Ghost,
    stopping: bool,
    failure: Option<Outcome>,
    trace: u64,
}

/// What a thread meeting an armed step runs there, before its group stops.
type StepAction = Box<dyn FnOnce() + Send>;

/// A pause armed at a named step: of which group, at steps named how, after how many, and
/// what the thread that meets it does first.
struct StepPlan {
    group: usize,
    prefix: &'static str,
    skip: u32,
    pause: u64,
    then: Option<StepAction>,
}

impl std::fmt::Debug for StepPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepPlan")
            .field("group", &self.group)
            .field("prefix", &self.prefix)
            .field("skip", &self.skip)
            .field("pause", &self.pause)
            .field("then", &self.then.is_some())
            .finish()
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signalled whenever a thread finishes (the caller of [`run`] waits on it).
    finished: Condvar,
}

/// The private payload a stopped run's threads unwind with.
struct Stop;

#[derive(Clone)]
struct Current {
    shared: Arc<Shared>,
    id: usize,
}

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// `d` in nanoseconds of virtual time (saturating: beyond 584 years is forever).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the calling thread belongs to a live run (so the primitives of this crate schedule).
#[inline]
pub fn is_simulated() -> bool {
    ACTIVE.with(Cell::get)
}

/// Runs `f` on the run's ghost state with the calling thread's holder (its task, and the lane
/// it acts as: [`crate::ghost::as_lane`]) and group; `None` outside a run. Not a sync point.
pub(crate) fn with_ghost<R>(
    f: impl FnOnce(&mut crate::ghost::Ghost, usize, usize) -> R,
) -> Option<R> {
    let cur = current()?;
    let mut state = lock(&cur.shared);
    let group = state.tasks[cur.id].group;
    Some(f(&mut state.ghost, crate::ghost::holder(cur.id), group))
}

fn current() -> Option<Current> {
    if !is_simulated() {
        return None;
    }
    CURRENT.with(|c| c.borrow().clone())
}

/// Unwinds the calling thread out of a stopped run (never while it is already unwinding).
fn stop_here() {
    if !std::thread::panicking() {
        resume_unwind(Box::new(Stop));
    }
}

impl State {
    fn runnable(&self, id: usize) -> bool {
        let task = &self.tasks[id];
        task.status == Status::Runnable && self.paused_until[task.group] <= self.now
    }

    /// Picks the next thread; `yielded` is the caller that asked to let others go first.
    /// Advances virtual time while nothing can run. `None`: nothing ever can (deadlock).
    fn pick(&mut self, yielded: Option<usize>) -> Option<usize> {
        loop {
            let now = self.now;
            for task in &mut self.tasks {
                if let Status::Sleeping(until) = task.status
                    && until <= now
                {
                    task.status = Status::Runnable;
                }
            }
            let runnable: Vec<usize> = (0..self.tasks.len())
                .filter(|&i| self.runnable(i))
                .collect();
            if !runnable.is_empty() {
                let priorities: Vec<u64> =
                    runnable.iter().map(|&i| self.tasks[i].priority).collect();
                let chosen = self.strategy.choose(
                    &mut self.rng,
                    self.steps,
                    &runnable,
                    &priorities,
                    yielded,
                    self.running,
                );
                if let Some(lowered) = chosen.lower {
                    self.tasks[lowered].priority = self.strategy.lowest();
                }
                return Some(chosen.task);
            }
            // Nothing can run now: jump to the next moment something can.
            let next = self
                .tasks
                .iter()
                .filter_map(|task| {
                    let paused = self.paused_until[task.group];
                    match task.status {
                        Status::Runnable => Some(paused),
                        Status::Sleeping(until) => Some(until.max(paused)),
                        Status::Joining(_) | Status::Done => None,
                    }
                })
                .min()?;
            self.now = self.now.max(next);
        }
    }

    fn record(&mut self, chosen: usize) {
        self.trace =
            (self.trace.rotate_left(7) ^ chosen as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn stop(&mut self, failure: Option<Outcome>) {
        if self.failure.is_none() {
            self.failure = failure;
        }
        if !self.stopping {
            self.stopping = true;
            for task in &self.tasks {
                task.wake.notify_one();
            }
        }
    }
}

impl Shared {
    /// Hands the baton to the strategy's choice and waits for it to come back.
    fn reschedule(&self, mut state: MutexGuard<'_, State>, me: usize, yielded: bool) {
        if state.stopping {
            drop(state);
            stop_here();
            return;
        }
        state.steps += 1;
        state.now += state.step_cost;
        if state.steps > state.max_steps {
            state.stop(Some(Outcome::StepLimit));
            drop(state);
            stop_here();
            return;
        }
        let Some(next) = state.pick(yielded.then_some(me)) else {
            let waiting: Vec<String> = state
                .tasks
                .iter()
                .filter_map(|t| match t.status {
                    Status::Joining(j) => Some(format!("{} joins {}", t.name, state.tasks[j].name)),
                    _ => None,
                })
                .collect();
            state.stop(Some(Outcome::Deadlock(waiting.join(", "))));
            drop(state);
            stop_here();
            return;
        };
        state.record(next);
        if next != me {
            state.switches += 1;
            state.running = next;
            state.tasks[next].wake.notify_one();
            let wake = Arc::clone(&state.tasks[me].wake);
            while state.running != me && !state.stopping {
                state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if state.stopping {
                drop(state);
                stop_here();
            }
        }
    }

    /// The end of thread `me`: wakes its joiners and passes the baton on.
    fn finish(&self, me: usize) {
        let mut state = lock(self);
        state.tasks[me].status = Status::Done;
        for task in &mut state.tasks {
            if task.status == Status::Joining(me) {
                task.status = Status::Runnable;
            }
        }
        self.finished.notify_all();
        if state.stopping {
            return;
        }
        if me == 0 {
            // The first thread returned: the run is over.
            state.stop(None);
            return;
        }
        match state.pick(None) {
            Some(next) => {
                state.record(next);
                state.switches += 1;
                state.running = next;
                state.tasks[next].wake.notify_one();
            }
            None => state.stop(Some(Outcome::Deadlock(
                "every thread left waits to join another".into(),
            ))),
        }
    }

    /// Waits for thread `me`'s first turn; `false` if the run stopped first.
    fn first_turn(&self, me: usize) -> bool {
        let mut state = lock(self);
        let wake = Arc::clone(&state.tasks[me].wake);
        while state.running != me && !state.stopping {
            state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        !state.stopping
    }
}

/// Runs `body` as thread `id` of the run: waits for its turn, catches its panic, finishes.
fn task_body<T>(shared: Arc<Shared>, id: usize, body: impl FnOnce() -> T) -> Option<T> {
    ACTIVE.with(|a| a.set(true));
    CURRENT.with(|c| {
        *c.borrow_mut() = Some(Current {
            shared: Arc::clone(&shared),
            id,
        });
    });
    let result = if shared.first_turn(id) {
        catch_unwind(AssertUnwindSafe(body))
    } else {
        Err(Box::new(Stop) as Box<dyn std::any::Any + Send>)
    };
    let out = match result {
        Ok(value) => Some(value),
        Err(payload) => {
            if !payload.is::<Stop>() {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(a panic without a message)".into());
                let mut state = lock(&shared);
                let thread = state.tasks[id].name.clone();
                state.stop(Some(Outcome::Panicked { thread, message }));
            }
            None
        }
    };
    shared.finish(id);
    ACTIVE.with(|a| a.set(false));
    CURRENT.with(|c| *c.borrow_mut() = None);
    out
}

/// Runs `main` as the first thread of a new run under `config`, and every thread it spawns
/// through this crate, one at a time as the seed decides; returns when all of them have ended.
pub fn run<F: FnOnce() + Send + 'static>(config: Config, main: F) -> Report {
    let mut rng = Rng::new(config.seed);
    let strategy = StrategyState::new(&config.strategy, &mut rng);
    let first = Task {
        name: "main".into(),
        status: Status::Runnable,
        group: 0,
        priority: strategy.initial_priority(&mut rng),
        slept: 0,
        wake: Arc::new(Condvar::new()),
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            tasks: vec![first],
            running: 0,
            now: 0,
            step_cost: nanos(config.step_cost),
            max_steps: config.max_steps,
            rng,
            strategy,
            steps: 0,
            switches: 0,
            paused_until: vec![0],
            step_plans: Vec::new(),
            paused_at: Vec::new(),
            steps_met: BTreeMap::new(),
            ghost: crate::ghost::Ghost::default(),
            stopping: false,
            failure: None,
            trace: config.seed,
        }),
        finished: Condvar::new(),
    });
    let runner = Arc::clone(&shared);
    let spawned = std::thread::Builder::new()
        .name("sim-main".into())
        .spawn(move || {
            task_body(runner, 0, main);
        });
    if let Err(e) = spawned {
        return Report {
            outcome: Outcome::Hung(format!("cannot start a thread: {e}")),
            steps: 0,
            switches: 0,
            threads: 0,
            virtual_time: Duration::ZERO,
            trace: 0,
            paused_at: Vec::new(),
            steps_met: BTreeMap::new(),
        };
    }
    let mut state = lock(&shared);
    let mut last_steps = u64::MAX;
    let mut quiet = Duration::ZERO;
    let tick = Duration::from_millis(200).min(config.stall_limit);
    let mut hung = None;
    while state.tasks.iter().any(|t| t.status != Status::Done) {
        let (next, timeout) = shared
            .finished
            .wait_timeout(state, tick)
            .unwrap_or_else(|e| e.into_inner());
        state = next;
        if !timeout.timed_out() {
            continue;
        }
        if state.steps == last_steps {
            quiet += tick;
            if quiet >= config.stall_limit {
                let running = state.tasks.get(state.running).map(|t| t.name.clone());
                hung = Some(format!(
                    "no sync point for {:?}; last running: {}",
                    config.stall_limit,
                    running.unwrap_or_default()
                ));
                state.stop(None);
                break;
            }
        } else {
            last_steps = state.steps;
            quiet = Duration::ZERO;
        }
    }
    let outcome = match hung {
        Some(why) => Outcome::Hung(why),
        None => state.failure.clone().unwrap_or(Outcome::Finished),
    };
    Report {
        outcome,
        steps: state.steps,
        switches: state.switches,
        threads: state.tasks.len(),
        virtual_time: Duration::from_nanos(state.now),
        trace: state.trace,
        paused_at: std::mem::take(&mut state.paused_at),
        steps_met: std::mem::take(&mut state.steps_met),
    }
}

/// A sync point: the scheduler may let another thread of the run go first. Outside a run, does
/// nothing.
#[inline]
pub fn point() {
    if let Some(cur) = current() {
        let state = lock(&cur.shared);
        if state.stopping && std::thread::panicking() {
            return;
        }
        cur.shared.reschedule(state, cur.id, false);
    }
}

/// A sync point at which the caller asks to let the others go first (it spins, waiting for one
/// of them). Outside a run, `std::thread::yield_now`.
pub(crate) fn yield_point() {
    match current() {
        Some(cur) => {
            let state = lock(&cur.shared);
            if state.stopping {
                drop(state);
                stop_here();
                std::thread::yield_now();
                return;
            }
            cur.shared.reschedule(state, cur.id, true);
        }
        None => std::thread::yield_now(),
    }
}

/// Sleeps `d` of virtual time (a sync point). Outside a run, `std::thread::sleep`.
pub(crate) fn sleep(d: Duration) {
    match current() {
        Some(cur) => {
            let mut state = lock(&cur.shared);
            if state.stopping {
                drop(state);
                stop_here();
                std::thread::yield_now();
                return;
            }
            let until = state.now.saturating_add(nanos(d));
            state.tasks[cur.id].status = Status::Sleeping(until);
            state.tasks[cur.id].slept = state.tasks[cur.id].slept.saturating_add(nanos(d));
            cur.shared.reschedule(state, cur.id, false);
        }
        None => std::thread::sleep(d),
    }
}

/// The virtual time the calling thread has asked to sleep since it began; `None` outside a run.
pub(crate) fn slept() -> Option<Duration> {
    current().map(|cur| Duration::from_nanos(lock(&cur.shared).tasks[cur.id].slept))
}

/// Virtual nanoseconds since the run began; `None` outside a run.
pub(crate) fn now_nanos() -> Option<u64> {
    current().map(|cur| lock(&cur.shared).now)
}

/// A handle to a thread spawned in a run, to join it.
#[derive(Debug)]
pub(crate) struct TaskHandle {
    shared: Arc<Shared>,
    id: usize,
}

impl TaskHandle {
    /// Waits (a sync point, repeatedly) until the thread has ended.
    pub(crate) fn wait(&self) {
        let Some(cur) = current() else {
            // Joined from outside the run: the OS join waits.
            return;
        };
        loop {
            let mut state = lock(&self.shared);
            if state.tasks[self.id].status == Status::Done {
                return;
            }
            if state.stopping {
                drop(state);
                stop_here();
                return;
            }
            state.tasks[cur.id].status = Status::Joining(self.id);
            cur.shared.reschedule(state, cur.id, false);
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        lock(&self.shared).tasks[self.id].status == Status::Done
    }
}

/// Spawns `body` as a new thread of the caller's run in `group` (the caller's if `None`), or a
/// plain OS thread outside a run.
pub(crate) fn spawn<T: Send + 'static>(
    name: Option<String>,
    group: Option<Group>,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<(std::thread::JoinHandle<Option<T>>, Option<TaskHandle>)> {
    let mut builder = std::thread::Builder::new();
    if let Some(name) = &name {
        builder = builder.name(name.clone());
    }
    let Some(cur) = current() else {
        return builder.spawn(move || Some(body())).map(|h| (h, None));
    };
    let id = {
        let mut state = lock(&cur.shared);
        let group = group.map_or(state.tasks[cur.id].group, |g| g.0);
        let id = state.tasks.len();
        let priority = {
            let State { strategy, rng, .. } = &mut *state;
            strategy.initial_priority(rng)
        };
        state.tasks.push(Task {
            name: name.unwrap_or_else(|| format!("thread-{id}")),
            status: Status::Runnable,
            group,
            priority,
            slept: 0,
            wake: Arc::new(Condvar::new()),
        });
        id
    };
    let shared = Arc::clone(&cur.shared);
    match builder.spawn(move || task_body(shared, id, body)) {
        Ok(handle) => {
            point();
            Ok((
                handle,
                Some(TaskHandle {
                    shared: cur.shared,
                    id,
                }),
            ))
        }
        Err(e) => {
            lock(&cur.shared).tasks[id].status = Status::Done;
            Err(e)
        }
    }
}

/// A new group of threads (a simulated process), to spawn into with
/// [`crate::thread::spawn_in`] and to pause with [`pause`]. Outside a run, a group that nothing
/// pauses.
pub fn new_group() -> Group {
    match current() {
        Some(cur) => {
            let mut state = lock(&cur.shared);
            state.paused_until.push(0);
            Group(state.paused_until.len() - 1)
        }
        None => Group(0),
    }
}

/// The calling thread's group.
pub fn current_group() -> Group {
    match current() {
        Some(cur) => Group(lock(&cur.shared).tasks[cur.id].group),
        None => Group(0),
    }
}

/// Pauses every thread of `group` for `d` of virtual time from now, wherever each one is (a
/// process stopped by the operating system); then a sync point. Outside a run, does nothing.
pub fn pause(group: Group, d: Duration) {
    if let Some(cur) = current() {
        {
            let mut state = lock(&cur.shared);
            let until = state.now.saturating_add(nanos(d));
            if let Some(paused) = state.paused_until.get_mut(group.0) {
                *paused = (*paused).max(until);
            }
        }
        point();
    }
}

/// Whether every thread of `group` is paused now (by [`pause`], or a met [`pause_at_step`]
/// plan). Outside a run, false.
pub fn is_paused(group: Group) -> bool {
    current().is_some_and(|cur| {
        let state = lock(&cur.shared);
        state
            .paused_until
            .get(group.0)
            .is_some_and(|&until| until > state.now)
    })
}

/// A named step of a protocol — a place between two of its verbs where a process stopped by
/// the operating system would leave the others a window (a retraining between retiring a
/// record and redirecting its slot, say): a sync point at which an armed [`pause_at_step`] plan
/// of the caller's group may stop the group. Outside a run, does nothing.
pub fn step(name: &'static str) {
    if let Some(cur) = current() {
        let mut then = None;
        let out_of_order;
        {
            let mut state = lock(&cur.shared);
            *state.steps_met.entry(name).or_default() += 1;
            let group = state.tasks[cur.id].group;
            out_of_order = state.ghost.step_met(crate::ghost::holder(cur.id), name);
            if let Some(i) = state
                .step_plans
                .iter()
                .position(|p| p.group == group && name.starts_with(p.prefix))
            {
                if state.step_plans[i].skip == 0 {
                    let plan = state.step_plans.swap_remove(i);
                    then = plan.then;
                    let until = state.now.saturating_add(plan.pause);
                    if let Some(paused) = state.paused_until.get_mut(group) {
                        *paused = (*paused).max(until);
                    }
                    state.paused_at.push(name);
                } else {
                    state.step_plans[i].skip -= 1;
                }
            }
        }
        if let Some(broken) = out_of_order {
            fail(&broken);
        }
        if let Some(then) = then {
            then();
        }
        point();
    }
}

/// Arms a pause of `group` at a named [`step`]: the threads of `group` pass `skip` steps whose
/// names start with `prefix` (`""` for any), and the next such step stops the whole group for
/// `d` of virtual time from there. Replaces a plan of `group` not yet met. Outside a run, does
/// nothing.
pub fn pause_at_step(group: Group, prefix: &'static str, skip: u32, d: Duration) {
    arm_step(group, prefix, skip, d, None);
}

/// [`pause_at_step`], where the thread that meets the step first runs `then` (its group already
/// stopping: whatever `then` does to other processes happens inside the window the pause
/// opens — a fault armed on the paused process's next batch, another process told to drop its
/// caches). `then` may use the run's primitives. Outside a run, does nothing.
pub fn pause_at_step_then(
    group: Group,
    prefix: &'static str,
    skip: u32,
    d: Duration,
    then: impl FnOnce() + Send + 'static,
) {
    arm_step(group, prefix, skip, d, Some(Box::new(then)));
}

fn arm_step(group: Group, prefix: &'static str, skip: u32, d: Duration, then: Option<StepAction>) {
    if let Some(cur) = current() {
        let replaced = {
            let mut state = lock(&cur.shared);
            let replaced = take_plans(&mut state, group);
            state.step_plans.push(StepPlan {
                group: group.0,
                prefix,
                skip,
                pause: nanos(d),
                then,
            });
            replaced
        };
        // Dropped outside the lock: an action's captures may take sync points as they go.
        drop(replaced);
        point();
    }
}

/// Removes `group`'s plans from the state (to be dropped once its lock is released).
fn take_plans(state: &mut State, group: Group) -> Vec<StepPlan> {
    let (taken, kept) = std::mem::take(&mut state.step_plans)
        .into_iter()
        .partition(|p| p.group == group.0);
    state.step_plans = kept;
    taken
}

/// Disarms a [`pause_at_step`] plan of `group` not yet met. Outside a run, does nothing.
pub fn disarm_step_pause(group: Group) {
    if let Some(cur) = current() {
        let taken = take_plans(&mut lock(&cur.shared), group);
        drop(taken);
    }
}

/// A pseudo-random number from the run's seed (the same in a replay); outside a run, from a
/// process-wide sequence.
pub fn random_u64() -> u64 {
    match current() {
        Some(cur) => lock(&cur.shared).rng.next_u64(),
        None => {
            use std::sync::atomic::{AtomicU64, Ordering};
            static SEQUENCE: AtomicU64 = AtomicU64::new(0x2545_f491_4f6c_dd1d);
            let mut x = SEQUENCE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) | 1;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }
}

/// Stops the caller's run (a check failed): every thread unwinds at its next sync point and the
/// run reports `Panicked` with `message`. Outside a run, panics.
pub fn fail(message: &str) -> ! {
    if let Some(cur) = current() {
        let mut state = lock(&cur.shared);
        let thread = state.tasks[cur.id].name.clone();
        state.stop(Some(Outcome::Panicked {
            thread,
            message: message.to_string(),
        }));
    }
    panic!("{message}");
}
