use std::time::Duration;

use leaf_store::BulkLoadConfig;
use sim_transport::SimTransport;

use crate::{Store, StoreConfig, bootstrap};

#[test]
fn a_retired_operation_counts_as_running_until_every_node_has_fenced_it() {
    // The renewer never runs: nothing is revoked.
    let store = quiet_store(2, Duration::from_secs(3600));
    let client = store.client().expect("client");
    let members = &store.caches().members;
    let epoch = members.epochs.current();
    assert!(members.quiescent_since(epoch + 1), "nothing runs");
    let ids = client.registered_ids().to_vec();
    assert!(ids.iter().all(|&id| id != 0), "registered on both nodes");
    assert!(members.retire(client.connection_index(), ids, None, epoch));
    assert!(
        !members.quiescent_since(epoch + 1),
        "a batch of the retired operation may still land: it runs until fenced"
    );
    assert!(members.quiescent_since(epoch), "in its own epoch");
}

/// A store over `nodes` memory nodes of tiny slots (keys 0, 10, …, 3990), renewing every
/// `renewal` (an hour: its renewer never runs during a test).
pub(crate) fn quiet_store(nodes: usize, renewal: Duration) -> Store<SimTransport> {
    let config = BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 4,
        slot_leaves: 2,
        ..BulkLoadConfig::default()
    };
    let transport = SimTransport::anonymous(&vec![16 << 20; nodes]).expect("pool");
    bootstrap(
        &transport,
        (0..400).map(|k| (k * 10, k * 10)).collect(),
        &config,
    )
    .expect("load");
    Store::open(
        transport,
        StoreConfig {
            lease_renewal: renewal,
            ..StoreConfig::default()
        },
    )
    .expect("open")
}
