//! Shared by the tests that run the `rolex` binary.

use std::ffi::OsStr;
use std::process::Command;

pub const ROLEX: &str = env!("CARGO_BIN_EXE_rolex");

/// Runs `rolex` with `args` and checks that it failed as bad input must: exit code 2 and one line
/// on stderr, starting `rolex: `, no panic. Returns that line.
pub fn bad_input_line<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let out = Command::new(ROLEX).args(args).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(stderr.starts_with("rolex: "), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    stderr
}
