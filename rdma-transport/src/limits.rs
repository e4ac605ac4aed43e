//! What one doorbell batch may carry: defined once, enforced by every backend.
//!
//! On hardware a batch is a chain of work requests on one RC queue pair: at most its send-queue
//! depth of verbs, and its payloads staged in one registered buffer. The verbs backend configures
//! exactly these limits; the simulator enforces them too, so code above the transport meets them
//! in every test. Work that may be larger goes through [`crate::Endpoint::batches`], which splits
//! it into consecutive batches (one round trip each).

use crate::{TransportError, Verb};

/// Most verbs one batch may carry (the verbs backend's send-queue depth).
pub const MAX_BATCH_VERBS: usize = 1024;

/// Most staging bytes one batch may use (the verbs backend's registered staging buffer): see
/// [`batch_bytes`].
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// Staging bytes `verbs` use: each verb's length (a READ's or WRITE's payload, 8 for an atomic)
/// rounded up to 8.
pub fn batch_bytes(verbs: &[Verb<'_>]) -> usize {
    verbs.iter().map(|v| v.len().next_multiple_of(8)).sum()
}

/// `Ok` if `verbs` fit one batch; else [`TransportError::BatchTooLarge`]. Backends check this
/// before executing anything, so an oversized batch has no effect.
pub fn validate_batch(verbs: &[Verb<'_>]) -> Result<(), TransportError> {
    let bytes = batch_bytes(verbs);
    if verbs.len() > MAX_BATCH_VERBS || bytes > MAX_BATCH_BYTES {
        return Err(TransportError::BatchTooLarge {
            verbs: verbs.len(),
            bytes,
        });
    }
    Ok(())
}
