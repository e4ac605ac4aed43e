//! Whole-store scenarios live in this crate's `tests/` directory. (Issues 5–7 fill it.)
