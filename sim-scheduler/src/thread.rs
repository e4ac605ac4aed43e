//! `std::thread` as a run sees it: spawned threads join the run, sleeping and yielding are sync
//! points, and sleep is virtual.

use std::time::Duration;

use crate::run::{Group, TaskHandle};

/// Sleeps `d` (virtual time in a run: the others run meanwhile, and the clock jumps when all
/// sleep).
pub fn sleep(d: Duration) {
    crate::run::sleep(d);
}

/// The virtual time the calling thread has asked to sleep since it began (its backoffs and
/// waits, not the time others ran while it waited to be scheduled); zero outside a run.
pub fn slept() -> Duration {
    crate::run::slept().unwrap_or_default()
}

/// Lets another thread run (in a run: any other runnable thread goes first).
pub fn yield_now() {
    crate::run::yield_point();
}

/// A handle to join a spawned thread.
#[derive(Debug)]
pub struct JoinHandle<T> {
    inner: std::thread::JoinHandle<Option<T>>,
    task: Option<TaskHandle>,
}

impl<T> JoinHandle<T> {
    /// Waits for the thread to end; `Err` if it panicked (or its run stopped).
    pub fn join(self) -> std::thread::Result<T> {
        if let Some(task) = &self.task {
            task.wait();
        }
        match self.inner.join() {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(Box::new("the thread's run stopped it, or it panicked")),
            Err(payload) => Err(payload),
        }
    }

    /// Whether the thread has ended.
    pub fn is_finished(&self) -> bool {
        match &self.task {
            Some(task) => task.is_finished(),
            None => self.inner.is_finished(),
        }
    }
}

/// Spawns a thread (in a run, in the caller's group).
///
/// # Panics
/// If the operating system cannot start a thread, as `std::thread::spawn` does.
pub fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    Builder::new()
        .spawn(f)
        .unwrap_or_else(|e| panic!("failed to spawn a thread: {e}"))
}

/// Spawns a thread named `name` in `group` of the caller's run (a simulated process).
///
/// # Errors
/// If the operating system cannot start a thread.
pub fn spawn_in<T: Send + 'static>(
    group: Group,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    let (inner, task) = crate::run::spawn(Some(name.to_string()), Some(group), f)?;
    Ok(JoinHandle { inner, task })
}

/// `std::thread::Builder`: a thread's name, then `spawn`.
#[derive(Debug, Default)]
pub struct Builder {
    name: Option<String>,
}

impl Builder {
    /// A builder with no name.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the thread.
    #[must_use]
    pub fn name(mut self, name: String) -> Self {
        self.name = Some(name);
        self
    }

    /// Spawns the thread.
    ///
    /// # Errors
    /// If the operating system cannot start a thread.
    pub fn spawn<T: Send + 'static>(
        self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<JoinHandle<T>> {
        let (inner, task) = crate::run::spawn(self.name, None, f)?;
        Ok(JoinHandle { inner, task })
    }
}
