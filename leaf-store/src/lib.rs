//! ROLEX's remote memory layout and the verbs that act on it. (Issue 4 builds this crate.)
