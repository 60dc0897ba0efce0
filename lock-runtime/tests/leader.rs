//! Leader election on a real server: one leader at a time among many
//! candidates, with growing tokens; a resigning or dropped leader hands
//! over at once; a leader is told when its lock is taken away or Redis
//! restarts, and a campaign waits through the outage; `leader_of` names
//! the leader and its token; a waiting candidate does not poll.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{builder, client, connect, ok, start_server_with_clients, within};
use lock_runtime::{Election, Leadership, LockError};
use lock_testkit::{RedisServer, unique_key};

/// Campaigns in a task of its own; resolves to when the campaign ended and how.
fn spawn_campaign(
    election: Election,
) -> tokio::task::JoinHandle<(Instant, Result<Leadership, LockError>)> {
    tokio::spawn(async move {
        let outcome = election.campaign().await;
        (Instant::now(), outcome)
    })
}

/// Waits for a spawned campaign, failing with the server log after `limit`.
async fn elected(
    server: &RedisServer,
    limit: Duration,
    what: &str,
    campaign: tokio::task::JoinHandle<(Instant, Result<Leadership, LockError>)>,
) -> (Instant, Leadership) {
    let (at, outcome) = within(server, limit, what, campaign)
        .await
        .expect("campaign task");
    (at, ok(server, outcome))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_tokens_grow_across_leaders() {
    const ROUNDS: usize = 3;
    let (server, clients) = start_server_with_clients::<3>().await;
    let name = unique_key("one-leader");
    let leading = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut candidates = Vec::new();
    // Two candidates per client: they wait behind each other in-process,
    // and across clients through release messages.
    for candidate in 0..6 {
        let locks = clients[candidate % 3].clone();
        let (name, leading, overlaps, fences) = (
            name.clone(),
            leading.clone(),
            overlaps.clone(),
            fences.clone(),
        );
        candidates.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let leader = locks
                    .election(name.as_str())
                    .lease(Duration::from_secs(5))
                    .campaign()
                    .await?;
                if leading.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences.lock().unwrap().push(leader.fence());
                tokio::time::sleep(Duration::from_millis(20)).await;
                leader.check()?;
                leading.fetch_sub(1, Ordering::SeqCst);
                leader.resign().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for candidate in candidates {
        let outcome = within(&server, Duration::from_secs(60), "candidates", candidate)
            .await
            .expect("candidate task");
        ok(&server, outcome);
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two leaders at once");
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 6 * ROUNDS);
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens did not grow from leader to leader: {fences:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigning_or_dropped_leader_hands_over_at_once() {
    let (server, [first, second, third]) = start_server_with_clients().await;
    let name = unique_key("handover");
    // Far longer than the bounds below: only a release explains a handover.
    let lease = Duration::from_secs(30);
    let election = |locks: &lock_runtime::LockClient| locks.election(name.as_str()).lease(lease);

    let leader = ok(&server, election(&first).campaign().await);
    let waiting = spawn_campaign(election(&second));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a second leader while the first leads"
    );
    let resigned = Instant::now();
    let old = leader.fence();
    ok(&server, leader.resign().await);
    let (at, leader) = elected(
        &server,
        Duration::from_secs(10),
        "after a resignation",
        waiting,
    )
    .await;
    assert!(
        at.duration_since(resigned) < Duration::from_secs(3),
        "took over {:?} after the resignation",
        at.duration_since(resigned)
    );
    assert!(leader.fence() > old);

    // Dropped rather than resigned: released in the background.
    let waiting = spawn_campaign(election(&third));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a second leader while the first leads"
    );
    let dropped = Instant::now();
    let old = leader.fence();
    drop(leader);
    let (at, leader) = elected(&server, Duration::from_secs(10), "after a drop", waiting).await;
    assert!(
        at.duration_since(dropped) < Duration::from_secs(3),
        "took over {:?} after the drop",
        at.duration_since(dropped)
    );
    assert!(leader.fence() > old);
    ok(&server, leader.resign().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lock_is_taken_away_is_told_and_stopped() {
    let (server, [leading, waiting, operator]) = start_server_with_clients().await;
    let name = unique_key("deposed");
    let lease = Duration::from_secs(3);
    let leader = ok(
        &server,
        leading
            .election(name.as_str())
            .lease(lease)
            .campaign()
            .await,
    );
    let candidate = spawn_campaign(waiting.election(name.as_str()).lease(lease));
    // The leader's work, which would run far longer than the test.
    let work = leader.scope(tokio::time::sleep(Duration::from_secs(600)));
    let taken = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(ok(&server, operator.force_release(&name).await));
    };
    let (stopped, ()) = within(
        &server,
        Duration::from_secs(10),
        "the deposed leader's work",
        futures_util::future::join(work, taken),
    )
    .await;
    let err = stopped.expect_err("stopped by the loss");
    assert!(err.is_lost(), "{err}");
    assert_eq!(err.key(), Some(name.as_str()));
    within(&server, Duration::from_secs(1), "lost()", leader.lost()).await;
    assert!(leader.is_lost());
    assert!(leader.check().expect_err("lost").is_lost());
    assert!(leader.lost_error().is_lost());

    // Another candidate leads, with a larger token; the old leader's
    // resignation reports the loss.
    let (_, next) = elected(
        &server,
        Duration::from_secs(10),
        "the next leader",
        candidate,
    )
    .await;
    assert!(next.fence() > leader.fence());
    let resigned = leader.resign().await;
    assert!(resigned.expect_err("was lost").is_lost());
    let info = ok(&server, operator.leader_of(&name).await).expect("a leader");
    assert!(info.is_held_by(&waiting));
    ok(&server, next.resign().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_is_told_when_redis_restarts_and_a_campaign_waits_through_the_outage() {
    let (mut server, [leading, waiting]) = start_server_with_clients().await;
    let name = unique_key("restart");
    let lease = Duration::from_secs(2);
    let leader = ok(
        &server,
        leading
            .election(name.as_str())
            .lease(lease)
            .campaign()
            .await,
    );
    let candidate = spawn_campaign(waiting.election(name.as_str()).lease(lease));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Down for longer than the lease, then back without its data.
    server.kill();
    within(
        &server,
        Duration::from_secs(10),
        "lost() while Redis is down",
        leader.lost(),
    )
    .await;
    assert!(leader.is_lost());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !candidate.is_finished(),
        "the campaign gave up while Redis was down"
    );
    server.restart();

    // The campaign never returned its connection errors: it leads once
    // Redis is back (after the restart quarantine), with a larger token.
    let (_, next) = elected(
        &server,
        Duration::from_secs(30),
        "the leader after the restart",
        candidate,
    )
    .await;
    assert!(
        next.fence() > leader.fence(),
        "{} <= {}",
        next.fence(),
        leader.fence()
    );
    drop(leader);
    ok(&server, next.resign().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_of_names_the_leader_and_its_token_or_nobody() {
    let server = RedisServer::start();
    let scheduler = connect(builder(&server).name("scheduler-a")).await;
    let other = client(&server).await;
    let name = unique_key("leader-of");
    assert_eq!(ok(&server, other.leader_of(&name).await), None);

    let leader = ok(
        &server,
        scheduler
            .election(name.as_str())
            .lease(Duration::from_secs(10))
            .campaign()
            .await,
    );
    let info = ok(&server, other.leader_of(&name).await).expect("a leader");
    assert_eq!(info.name, name);
    assert_eq!(info.fence, leader.fence());
    let owner = info.owner_id.as_ref().expect("a readable owner id");
    assert_eq!(owner.name, "scheduler-a");
    assert_eq!(owner.pid, std::process::id());
    assert_eq!(owner.client, scheduler.id());
    assert!(info.is_held_by(&scheduler) && !info.is_held_by(&other));
    assert!(info.label().starts_with("scheduler-a@"), "{}", info.label());
    assert!(info.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(10)));
    assert!(info.to_string().contains("scheduler-a@"), "{info}");

    let first = leader.fence();
    ok(&server, leader.resign().await);
    assert_eq!(ok(&server, other.leader_of(&name).await), None);

    let leader = ok(&server, other.election(name.as_str()).campaign().await);
    let info = ok(&server, scheduler.leader_of(&name).await).expect("a leader");
    assert!(info.is_held_by(&other));
    assert_eq!(info.fence, leader.fence());
    assert!(info.fence > first);
    drop(leader);

    // A name held as a semaphore has no leader.
    let permits = unique_key("permits");
    let permit = ok(
        &server,
        other.semaphore(permits.as_str(), 2).acquire().await,
    );
    let refused = other.leader_of(&permits).await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
    ok(&server, permit.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_campaign_times_out_and_try_lead_does_not_wait() {
    let (server, [leading, other]) = start_server_with_clients().await;
    let name = unique_key("bounded");
    let leader = ok(&server, leading.election(name.as_str()).campaign().await);

    let started = Instant::now();
    let refused = other
        .election(name.as_str())
        .wait(Duration::from_millis(500))
        .campaign()
        .await;
    let err = refused.expect_err("another leads");
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.key(), Some(name.as_str()));
    assert!(started.elapsed() >= Duration::from_millis(450));

    let started = Instant::now();
    let tried = ok(&server, other.election(name.as_str()).try_lead().await);
    assert!(tried.is_none(), "another leads");
    let once = other
        .election(name.as_str())
        .wait(Duration::ZERO)
        .campaign()
        .await;
    assert!(once.expect_err("another leads").is_timeout());
    assert!(started.elapsed() < Duration::from_secs(5));

    // Errors that waiting cannot cure end a campaign at once.
    let refused = other
        .election(name.as_str())
        .lease(Duration::from_millis(1))
        .campaign()
        .await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
    let refused = other.election("").campaign().await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");

    ok(&server, leader.resign().await);
    let now = ok(&server, other.election(name.as_str()).try_lead().await);
    ok(&server, now.expect("nobody leads").resign().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_candidate_does_not_poll() {
    let (server, [leading, waiting]) = start_server_with_clients().await;
    let name = unique_key("quiet");
    let lease = Duration::from_secs(3);
    let leader = ok(
        &server,
        leading
            .election(name.as_str())
            .lease(lease)
            .campaign()
            .await,
    );
    let candidate = spawn_campaign(waiting.election(name.as_str()).lease(lease));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The leader renews every second (a third of its lease); the candidate
    // looks again when the leader's lease would run out, about every two
    // seconds. Polling at the lock's fallback pace (every 100 ms) would
    // make some 60 calls.
    let before = server.script_calls();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let calls = server.script_calls() - before;
    assert!(calls <= 25, "{calls} script calls in 6 s");
    assert!(!candidate.is_finished());
    ok(&server, leader.resign().await);
    let (_, next) = elected(
        &server,
        Duration::from_secs(10),
        "the next leader",
        candidate,
    )
    .await;
    ok(&server, next.resign().await);
}
