//! Learned models for ROLEX: OptimalPLR with error bound ε, leaf-range prediction with leaf size δ,
//! and the top-level model index. Depends on no transport. (Issue 3 builds this crate.)
