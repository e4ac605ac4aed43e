//! The `rolex` command. (Issue 7 builds it; until then it only explains itself.)

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "rolex: the bench, memnode, load and inspect commands are not built yet; \
         see README.md for what runs today"
    );
    ExitCode::from(2)
}
