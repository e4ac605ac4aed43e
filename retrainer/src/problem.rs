//! Why the worker put a slot off, as published in the put-off word for compute nodes
//! ([`leaf_store::put_off`]): the mapping from the worker's error.

use leaf_store::put_off::PutOff;

use crate::RetrainError;

/// The put-off `error` stands for.
pub fn put_off(error: &RetrainError) -> PutOff {
    match error {
        RetrainError::ModelRegionFull { needed } => PutOff::ModelRegionFull {
            kib: needed.div_ceil(1024),
        },
        RetrainError::LeafLocked { leaf, .. } => PutOff::LeafLocked { leaf: *leaf },
        _ => PutOff::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_what_compute_nodes_are_told() {
        assert_eq!(
            put_off(&RetrainError::LeafLocked { slot: 7, leaf: 3 }),
            PutOff::LeafLocked { leaf: 3 }
        );
        assert_eq!(
            put_off(&RetrainError::ModelRegionFull { needed: 5000 }),
            PutOff::ModelRegionFull { kib: 5 }
        );
        assert_eq!(put_off(&RetrainError::Train("x".into())), PutOff::Other);
    }
}
