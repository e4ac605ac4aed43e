//! Memory-node retraining with shadow redirection.
//!
//! Today this crate holds the compute side of the retraining queue ([`queue`]): how a compute
//! node asks for a slot to be retrained. The worker that consumes the queue and swaps records
//! (shadow redirection) is built by issue 6.

pub mod queue;
