//! The command lines of the workspace's examples and benchmarks.

/// The value of `--name value` in `args`, parsed as a `u64`; `default` when the flag is absent.
///
/// Errors (as a message for the user) when the flag is the last argument or its value is not a
/// decimal `u64`. Only the first occurrence counts.
pub fn flag_u64(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .ok_or(format!("{name} needs a value"))?
            .parse()
            .map_err(|e| format!("{name}: {e}")),
    }
}

/// An example's exit: the JSON line it measured on stdout (success), or `name: error` on stderr
/// and exit code 2.
pub fn print_json_or_fail(name: &str, outcome: Result<String, String>) -> std::process::ExitCode {
    match outcome {
        Ok(json) => {
            println!("{json}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::flag_u64;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn present_absent_missing_and_malformed_values() {
        let line = args(&["prog", "--keys", "42", "--runs"]);
        assert_eq!(flag_u64(&line, "--keys", 7), Ok(42));
        assert_eq!(flag_u64(&line, "--seed", 7), Ok(7));
        assert_eq!(
            flag_u64(&line, "--runs", 7),
            Err("--runs needs a value".to_string())
        );
        let bad = args(&["prog", "--keys", "-3"]);
        let err = flag_u64(&bad, "--keys", 7).expect_err("negative is not a u64");
        assert!(err.starts_with("--keys: "), "{err}");
    }
}
