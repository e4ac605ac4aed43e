//! The command's errors: bad input, which ends the command before any work with exit code 2, a
//! run that failed, exit code 1, a run whose verify could not settle while others wrote the pool,
//! exit code 3, or a run stopped by Ctrl-C, exit code 130 (after writing what it measured). Each
//! is one line on standard error.

use std::fmt;

/// The exit code of a command stopped by SIGINT (128 + 2, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// Why a command stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// The command line, a file or a size cannot work: nothing ran (exit code 2).
    Input(String),
    /// The run failed: an index, transport or pool error, or a check that found a problem
    /// (exit code 1).
    Run(String),
    /// Ctrl-C stopped the run; what it measured was written (exit code 130).
    Interrupted(String),
    /// The run succeeded and its report was written, but its verify was inconclusive: the pool
    /// changed while it was read ([`crate::verdict::INCONCLUSIVE`], exit code 3).
    Inconclusive(String),
}

impl CliError {
    /// The exit code: 2 for bad input, 1 for a failed run, 3 for an inconclusive verify,
    /// [`INTERRUPTED`] for a run stopped by Ctrl-C.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Run(_) => 1,
            CliError::Inconclusive(_) => crate::verdict::INCONCLUSIVE,
            CliError::Interrupted(_) => INTERRUPTED,
        }
    }

    /// The same error with `context` in front of its message.
    pub fn context(self, context: impl fmt::Display) -> Self {
        match self {
            CliError::Input(m) => CliError::Input(format!("{context}: {m}")),
            CliError::Run(m) => CliError::Run(format!("{context}: {m}")),
            CliError::Interrupted(m) => CliError::Interrupted(format!("{context}: {m}")),
            CliError::Inconclusive(m) => CliError::Inconclusive(format!("{context}: {m}")),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Input(m)
            | CliError::Run(m)
            | CliError::Interrupted(m)
            | CliError::Inconclusive(m) => f.write_str(m),
        }
    }
}

/// A message the checks wrote: bad input.
impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::Input(message)
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        CliError::Input(message.to_string())
    }
}

/// Errors of the libraries a run uses: the run failed.
macro_rules! run_errors {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for CliError {
            fn from(e: $t) -> Self {
                CliError::Run(e.to_string())
            }
        })*
    };
}

/// A pool error caused by what was asked (sizes, keys, configuration, a file that is no pool) is
/// bad input; any other is a failed run.
impl From<leaf_store::LeafStoreError> for CliError {
    fn from(e: leaf_store::LeafStoreError) -> Self {
        use leaf_store::LeafStoreError as E;
        match e {
            E::BadMagic(_)
            | E::UnsupportedVersion { .. }
            | E::PoolTooSmall { .. }
            | E::InvalidConfig(_)
            | E::DuplicateKey(_)
            | E::NoKeys
            | E::KeyOutOfRange { .. }
            | E::ValueTooLarge { .. } => CliError::Input(e.to_string()),
            e => CliError::Run(e.to_string()),
        }
    }
}

impl From<index_core::IndexError> for CliError {
    fn from(e: index_core::IndexError) -> Self {
        match e {
            index_core::IndexError::Layout(inner) => inner.into(),
            index_core::IndexError::Config(_) => CliError::Input(e.to_string()),
            e => CliError::Run(e.to_string()),
        }
    }
}

impl From<bplus_tree::TreeError> for CliError {
    fn from(e: bplus_tree::TreeError) -> Self {
        use bplus_tree::TreeError as E;
        match e {
            E::Config(_) | E::PoolTooSmall { .. } | E::DuplicateKey(_) => {
                CliError::Input(e.to_string())
            }
            e => CliError::Run(e.to_string()),
        }
    }
}

run_errors!(
    rdma_transport::TransportError,
    retrainer::RetrainError,
    sim_transport::PoolError,
    serde_json::Error,
    hdrhistogram::errors::CreationError,
    hdrhistogram::AdditionError,
    std::io::Error,
    clap::Error,
    Failed,
);

/// Why one operation of an index under test failed.
#[derive(Debug)]
pub enum Failed {
    /// The client's endpoint is gone (a fresh one may go on).
    ConnectionLost(String),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::ConnectionLost(e) | Failed::Other(e) => f.write_str(e),
        }
    }
}

/// Bad input: `input!("…", args)` is `CliError::Input(format!("…", args))`.
macro_rules! input {
    ($($arg:tt)*) => {
        $crate::error::CliError::Input(format!($($arg)*))
    };
}

/// A failed run: `failed!("…", args)` is `CliError::Run(format!("…", args))`.
macro_rules! failed {
    ($($arg:tt)*) => {
        $crate::error::CliError::Run(format!($($arg)*))
    };
}

pub(crate) use {failed, input};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_exits_2_and_a_failed_run_1() {
        let bad: CliError = String::from("--threads 0").into();
        assert_eq!(
            (bad.exit_code(), bad.to_string()),
            (2, "--threads 0".into())
        );
        let run: CliError = index_core::IndexError::TooManyRetries(3).into();
        assert_eq!(run.exit_code(), 1);
        assert_eq!(input!("a {}", 1), CliError::Input("a 1".into()));
        assert_eq!(failed!("b").context("c"), CliError::Run("c: b".into()));
    }
}
