//! Batches posted without waiting, on the simulator: they land later than posted, in the order
//! of their queue pair, in either order across memory nodes, no earlier than the latency mode's
//! round trip; and every fault the simulator injects applies to them as they land.

#![cfg(not(loom))]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_transport::{Endpoint, RemoteAddr, Ticket, Transport, TransportError, Verb};
use sim_transport::{SimConfig, SimEndpoint, SimTransport};

fn at(node: u16, offset: u64) -> RemoteAddr {
    RemoteAddr::new(node, offset).expect("addr")
}

fn complete(
    ep: &mut SimEndpoint,
    ticket: Ticket,
    verbs: &mut [Verb<'_>],
) -> Result<(), TransportError> {
    ep.wait(ticket).deliver(verbs)
}

#[test]
fn a_posted_batch_lands_only_when_its_endpoint_polls() {
    let t = SimTransport::anonymous(&[4096]).expect("pool");
    let mut ep = t.endpoint().expect("endpoint");
    let mut other = t.endpoint().expect("endpoint");
    let ticket = ep.post(&[Verb::faa(at(0, 0), 1)]).expect("post");
    assert_eq!(ep.in_flight(), 1);
    assert_eq!(other.read_word(at(0, 0)), Ok(0), "posted, not landed yet");
    let mut verbs = [Verb::faa(at(0, 0), 1)];
    complete(&mut ep, ticket, &mut verbs).expect("faa");
    assert_eq!(verbs[0].old_value(), Some(0));
    assert_eq!(other.read_word(at(0, 0)), Ok(1));
    assert_eq!(ep.in_flight(), 0);
}

#[test]
fn in_latency_mode_a_batch_completes_no_earlier_than_its_round_trip() {
    let rtt = Duration::from_micros(200);
    let config = SimConfig {
        latency: Some(rtt),
        ..SimConfig::default()
    };
    let t = SimTransport::anonymous_with(&[4096], config).expect("pool");
    let mut ep = t.endpoint().expect("endpoint");
    for _ in 0..20 {
        let posted = Instant::now();
        let ticket = ep.post(&[Verb::faa(at(0, 0), 1)]).expect("post");
        complete(&mut ep, ticket, &mut [Verb::faa(at(0, 0), 1)]).expect("faa");
        assert!(
            posted.elapsed() >= rtt,
            "completed after {:?}",
            posted.elapsed()
        );
    }
    // Eight in flight at once take about one round trip, not eight.
    let started = Instant::now();
    let tickets: Vec<Ticket> = (0..8)
        .map(|_| ep.post(&[Verb::faa(at(0, 0), 1)]).expect("post"))
        .collect();
    for ticket in tickets {
        complete(&mut ep, ticket, &mut [Verb::faa(at(0, 0), 1)]).expect("faa");
    }
    assert!(started.elapsed() >= rtt);
    assert_eq!(ep.read_word(at(0, 0)), Ok(28));
}

#[test]
fn batches_on_different_memory_nodes_land_in_either_order() {
    let t = SimTransport::anonymous(&[4096, 4096]).expect("pools");
    let landed: Arc<Mutex<Vec<u16>>> = Arc::default();
    let log = Arc::clone(&landed);
    assert!(t.observe_writes(Box::new(move |addr, _| {
        log.lock().expect("log").push(addr.node());
    })));
    let mut ep = t.endpoint().expect("endpoint");
    let word = 1u64.to_le_bytes();
    let (mut first_zero, mut first_one) = (0, 0);
    for _ in 0..200 {
        landed.lock().expect("log").clear();
        let a = ep.post(&[Verb::write(at(0, 0), &word)]).expect("post");
        let b = ep.post(&[Verb::write(at(1, 0), &word)]).expect("post");
        complete(&mut ep, b, &mut [Verb::write(at(1, 0), &word)]).expect("b");
        complete(&mut ep, a, &mut [Verb::write(at(0, 0), &word)]).expect("a");
        match landed.lock().expect("log").first() {
            Some(0) => first_zero += 1,
            Some(_) => first_one += 1,
            None => panic!("nothing landed"),
        }
    }
    assert!(
        first_zero > 0 && first_one > 0,
        "{first_zero} / {first_one}"
    );
}

#[test]
fn a_fault_planned_for_a_later_verb_fails_the_posted_batch_it_lands_in() {
    let t = SimTransport::anonymous(&[4096]).expect("pool");
    let mut ep = t.endpoint().expect("endpoint");
    ep.fail_after(1);
    let first = ep.post(&[Verb::faa(at(0, 0), 1)]).expect("post");
    let second = ep
        .post(&[Verb::faa(at(0, 8), 1), Verb::faa(at(0, 16), 1)])
        .expect("post");
    let third = ep.post(&[Verb::faa(at(0, 24), 1)]).expect("post");
    complete(&mut ep, first, &mut [Verb::faa(at(0, 0), 1)]).expect("first");
    assert_eq!(
        complete(
            &mut ep,
            second,
            &mut [Verb::faa(at(0, 8), 1), Verb::faa(at(0, 16), 1)]
        ),
        Err(TransportError::InjectedFault)
    );
    complete(&mut ep, third, &mut [Verb::faa(at(0, 24), 1)]).expect("third");
    let words: Vec<u64> = [0, 8, 16, 24]
        .iter()
        .map(|&o| ep.read_word(at(0, o)).expect("read"))
        .collect();
    assert_eq!(
        words,
        [1, 0, 0, 1],
        "the failed verb and the one after it did not run"
    );
}

#[test]
fn a_lost_completion_breaks_the_batches_posted_after_it() {
    let t = SimTransport::anonymous(&[4096]).expect("pool");
    let mut ep = t.endpoint().expect("endpoint");
    ep.break_after(0);
    let lost = ep.post(&[Verb::faa(at(0, 0), 1)]).expect("post");
    let after = ep.post(&[Verb::faa(at(0, 8), 1)]).expect("post");
    assert!(matches!(
        complete(&mut ep, lost, &mut [Verb::faa(at(0, 0), 1)]),
        Err(TransportError::Broken(_))
    ));
    assert!(matches!(
        complete(&mut ep, after, &mut [Verb::faa(at(0, 8), 1)]),
        Err(TransportError::Broken(_))
    ));
    assert!(matches!(
        ep.post(&[Verb::faa(at(0, 8), 1)]),
        Err(TransportError::Broken(_))
    ));
    let check = t.endpoint().expect("endpoint");
    let mut check = check;
    assert_eq!(check.read_word(at(0, 0)), Ok(1), "the lost batch executed");
    assert_eq!(check.read_word(at(0, 8)), Ok(0), "nothing ran after it");
}

#[test]
fn a_crash_stops_the_posted_batch_it_lands_in_and_every_later_one() {
    let t = SimTransport::anonymous(&[4096]).expect("pool");
    let mut ep = t.endpoint().expect("endpoint");
    ep.crash_after(2);
    let tickets: Vec<Ticket> = (0..3u64)
        .map(|i| {
            ep.post(&[Verb::faa(at(0, 8 * i), 1), Verb::faa(at(0, 8 * i), 1)])
                .expect("post")
        })
        .collect();
    let outcomes: Vec<Result<(), TransportError>> = tickets
        .into_iter()
        .enumerate()
        .map(|(i, ticket)| {
            let i = i as u64;
            complete(
                &mut ep,
                ticket,
                &mut [Verb::faa(at(0, 8 * i), 1), Verb::faa(at(0, 8 * i), 1)],
            )
        })
        .collect();
    assert_eq!(outcomes[0], Ok(()));
    assert_eq!(outcomes[1], Err(TransportError::Crashed));
    assert_eq!(outcomes[2], Err(TransportError::Crashed));
    assert_eq!(
        ep.post(&[Verb::faa(at(0, 0), 1)]).err(),
        Some(TransportError::Crashed)
    );
    let mut check = t.endpoint().expect("endpoint");
    assert_eq!(check.read_word(at(0, 0)), Ok(2));
    assert_eq!(check.read_word(at(0, 8)), Ok(0));
}

#[test]
fn a_malformed_batch_is_refused_at_post_and_nothing_is_in_flight() {
    let t = SimTransport::anonymous(&[4096]).expect("pool");
    let mut ep = t.endpoint().expect("endpoint");
    assert_eq!(
        ep.post(&[Verb::faa(at(0, 0), 1), Verb::faa(at(0, 4), 1)])
            .err(),
        Some(TransportError::Misaligned(at(0, 4)))
    );
    assert_eq!(ep.in_flight(), 0);
    assert_eq!(ep.read_word(at(0, 0)), Ok(0));
}
