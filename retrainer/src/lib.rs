//! Memory-node retraining with shadow redirection. (Issue 6 builds this crate.)
