//! The ROLEX store: memory-node bootstrap and the compute-node client. (Issue 5 builds this crate.)
