//! Metrics and spans of locks taken against a real server: what is counted
//! and recorded for an acquire and release, a timeout, an error, a loss, a
//! renewal, and the body of a `#[distributed_lock]` function.
//!
//! The recorder and the span collector are global to this test binary (the
//! watchdog and releases on drop record from tasks of their own, which a
//! thread-local recorder would not see), so the tests take turns: each holds
//! its turn (`common::telemetry::take_turn`) while it runs, and reads the
//! metrics as deltas since its start.
#![cfg(feature = "metrics")]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::telemetry::{metrics, snapshotter, spans, take_turn};
use common::{builder, connect, lock_key, ok, start_server_with_clients, within};
use lock_runtime::{LockError, distributed_lock, metric_names::*};
use lock_testkit::{RedisServer, unique_key};

/// Waits until the only span of `key` has an outcome (releases on drop and
/// losses are recorded by tasks of their own), and returns its fields.
async fn ended(server: &RedisServer, key: &str) -> HashMap<String, String> {
    within(server, Duration::from_secs(5), "span outcome", async {
        loop {
            let spans = spans().of(key);
            assert_eq!(spans.len(), 1, "{spans:?}");
            if spans[0].contains_key("outcome") {
                return spans[0].clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

const EXCLUSIVE: (&str, &str) = ("kind", "exclusive");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release_are_counted_and_spanned() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-release");
    metrics();

    let guard = ok(&server, locks.lock(name.as_str()).acquire().await);
    let fence = guard.fence();
    // Re-entering inside the critical section is another acquisition of
    // the same held lock.
    let depth = ok(
        &server,
        guard
            .scope(async {
                let inner = locks.lock(name.as_str()).acquire().await?;
                let id = inner.span().id().expect("a span of its own");
                let depth = spans().by_id(&id).unwrap()["depth"].clone();
                inner.release().await?;
                Ok::<_, LockError>(depth)
            })
            .await,
    );
    assert_eq!(ok(&server, depth), "2");
    let held = metrics();
    assert_eq!(
        held.counter(LOCK_ACQUIRED_TOTAL, &[EXCLUSIVE]),
        2,
        "{held:?}"
    );
    // The re-entry released one level; the lock is still held, once.
    assert_eq!(held.counter(LOCK_RELEASED_TOTAL, &[EXCLUSIVE]), 1);
    assert_eq!(held.gauge(LOCK_HELD, &[EXCLUSIVE]), 1.0);
    ok(&server, guard.release().await);

    let after = metrics();
    assert_eq!(after.counter(LOCK_RELEASED_TOTAL, &[EXCLUSIVE]), 1);
    assert_eq!(after.gauge(LOCK_HELD, &[EXCLUSIVE]), -1.0);
    let waited = held.samples(LOCK_WAIT_SECONDS, &[EXCLUSIVE, ("outcome", "acquired")]);
    assert_eq!(waited.len(), 2, "{held:?}");
    assert!(waited.iter().all(|s| *s >= 0.0));
    let holds = after.samples(LOCK_HOLD_SECONDS, &[EXCLUSIVE, ("outcome", "released")]);
    assert_eq!(holds.len(), 1, "{after:?}");
    for name in [LOCK_TIMEOUTS_TOTAL, LOCK_LOST_TOTAL, LOCK_ERRORS_TOTAL] {
        assert_eq!(
            held.counter(name, &[]) + after.counter(name, &[]),
            0,
            "{name}"
        );
    }

    let spans = spans().of(&name);
    assert_eq!(spans.len(), 2, "one span per guard: {spans:?}");
    let outer = &spans[0];
    assert_eq!(outer["kind"], "exclusive");
    assert_eq!(outer["fence"], fence.to_string());
    assert_eq!(outer["depth"], "1");
    assert_eq!(outer["outcome"], "released");
    assert_eq!(outer["renewals"], "0");
    for field in ["wait_seconds", "hold_seconds"] {
        let seconds: f64 = outer[field].parse().unwrap();
        assert!(seconds >= 0.0, "{field}: {outer:?}");
    }
    assert!(!outer.contains_key("error"));
    assert_eq!(spans[1]["fence"], fence.to_string());
    assert_eq!(spans[1]["outcome"], "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_is_released_in_the_background_and_counted() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-drop");
    metrics();

    drop(ok(&server, locks.lock(name.as_str()).acquire().await));
    let span = ended(&server, &name).await;
    assert_eq!(span["outcome"], "released");
    let after = metrics();
    assert_eq!(after.counter(LOCK_RELEASED_TOTAL, &[EXCLUSIVE]), 1);
    assert_eq!(after.gauge(LOCK_HELD, &[EXCLUSIVE]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_contended_waits_are_measured() {
    let _turn = take_turn().await;
    let (server, [holder, waiter]) = start_server_with_clients().await;
    let name = unique_key("telemetry-timeout");
    let guard = ok(&server, holder.lock(name.as_str()).acquire().await);
    metrics();

    let wait = Duration::from_millis(100);
    let timed_out = waiter.lock(name.as_str()).wait(wait).acquire().await;
    assert!(timed_out.expect_err("held").is_timeout());
    let after_timeout = metrics();
    assert_eq!(
        after_timeout.counter(LOCK_TIMEOUTS_TOTAL, &[EXCLUSIVE]),
        1,
        "{after_timeout:?}"
    );
    assert_eq!(after_timeout.counter(LOCK_ACQUIRED_TOTAL, &[]), 0);
    let waited = after_timeout.samples(LOCK_WAIT_SECONDS, &[EXCLUSIVE, ("outcome", "timed_out")]);
    assert_eq!(waited.len(), 1);
    assert!(waited[0] >= wait.as_secs_f64(), "{waited:?}");
    let span = &spans().of(&name)[1];
    assert_eq!(span["outcome"], "timed_out");
    assert!(!span.contains_key("fence"), "{span:?}");
    assert!(span["wait_seconds"].parse::<f64>().unwrap() >= wait.as_secs_f64());

    // A waiter that gets the lock once the holder lets go waited about as
    // long as the holder kept it after the waiter asked (half of that, as a
    // generous bound: the waiter's task may start late). It counts among
    // the waiters while it waits.
    let waiting = common::spawn_acquire(waiter.lock(name.as_str()).wait(Duration::from_secs(10)));
    let kept = Duration::from_millis(200);
    let mut waiters = 0.0;
    common::until(Duration::from_secs(5), "the waiter counted", async || {
        waiters += metrics().gauge(LOCK_WAITERS, &[EXCLUSIVE]);
        waiters == 1.0
    })
    .await;
    tokio::time::sleep(kept).await;
    ok(&server, guard.release().await);
    let (_, second) = waiting.await.unwrap();
    ok(&server, ok(&server, second).release().await);
    let after = metrics();
    assert_eq!(
        after.gauge(LOCK_WAITERS, &[EXCLUSIVE]),
        -1.0,
        "no longer waiting"
    );
    let waited = after.samples(LOCK_WAIT_SECONDS, &[EXCLUSIVE, ("outcome", "acquired")]);
    assert_eq!(waited.len(), 1, "{after:?}");
    assert!(waited[0] >= (kept / 2).as_secs_f64(), "{waited:?}");
    let spans = spans().of(&name);
    assert_eq!(spans.len(), 3);
    assert_eq!(spans[2]["outcome"], "released");
    let span_waited: f64 = spans[2]["wait_seconds"].parse().unwrap();
    assert_eq!(span_waited, waited[0], "the span and the histogram agree");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_error_is_counted_by_class() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-wrongtype");
    server.cli(&["SET", &lock_key(&name), "not a lock"]);
    metrics();

    let err = locks
        .lock(name.as_str())
        .acquire()
        .await
        .expect_err("WRONGTYPE");
    assert!(matches!(err, LockError::WrongType { .. }), "{err}");
    let after = metrics();
    let labels = [EXCLUSIVE, ("operation", "acquire"), ("error", "wrong_type")];
    assert_eq!(after.counter(LOCK_ERRORS_TOTAL, &labels), 1, "{after:?}");
    assert_eq!(
        after
            .samples(LOCK_WAIT_SECONDS, &[EXCLUSIVE, ("outcome", "error")])
            .len(),
        1
    );
    let span = &spans().of(&name)[0];
    assert_eq!(span["outcome"], "error");
    assert!(span["error"].contains("WRONGTYPE"), "{span:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_counted_per_lock_and_timed_per_round_trip() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-renew");
    let lease = Duration::from_millis(600);
    metrics();

    let guard = ok(
        &server,
        locks.lock(name.as_str()).lease(lease).acquire().await,
    );
    // Renewed every lease/3 (a little earlier to batch): several times in
    // two leases.
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost());
    ok(&server, guard.release().await);
    let after = metrics();
    let trips = after.samples(LOCK_RENEWAL_ROUND_TRIP_SECONDS, &[("outcome", "ok")]);
    assert!(trips.len() >= 2, "{after:?}");
    let span = &spans().of(&name)[0];
    let renewals: u64 = span["renewals"].parse().unwrap();
    assert!(renewals >= 2, "{span:?}");
    assert!(renewals as usize <= trips.len(), "{span:?} {trips:?}");
    assert!(span["hold_seconds"].parse::<f64>().unwrap() >= (lease * 2).as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lock_is_counted_lost_once() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-deleted");
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    let held = metrics();
    assert_eq!(held.gauge(LOCK_HELD, &[EXCLUSIVE]), 1.0, "{held:?}");

    assert_eq!(server.cli(&["DEL", &lock_key(&name)]), "1");
    within(&server, Duration::from_secs(5), "lost()", guard.lost()).await;
    // Found by the watchdog, which stopped renewing it.
    let lost = metrics();
    let labels = [EXCLUSIVE, ("reason", "not_held")];
    assert_eq!(lost.counter(LOCK_LOST_TOTAL, &labels), 1, "{lost:?}");
    assert_eq!(lost.gauge(LOCK_HELD, &[EXCLUSIVE]), -1.0);

    assert!(guard.release().await.expect_err("lost").is_lost());
    let released = metrics();
    assert_eq!(released.counter(LOCK_LOST_TOTAL, &[]), 0, "counted once");
    assert_eq!(released.counter(LOCK_RELEASED_TOTAL, &[]), 0);
    let holds = released.samples(LOCK_HOLD_SECONDS, &[EXCLUSIVE, ("outcome", "lost")]);
    assert_eq!(holds.len(), 1, "{released:?}");
    assert_eq!(ended(&server, &name).await["outcome"], "lost");
}

/// A re-entry that finds the lock deleted loses the hold it entered: one
/// loss, not also an acquire error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_found_deleted_by_a_re_entry_is_counted_lost_once() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-reentry");
    let guard = ok(&server, locks.lock(name.as_str()).acquire().await);
    assert_eq!(server.cli(&["DEL", &lock_key(&name)]), "1");
    let again = guard
        .scope(async { locks.lock(name.as_str()).acquire().await })
        .await;
    assert!(matches!(&again, Ok(Err(err)) if err.is_lost()), "{again:?}");
    let counted = metrics();
    let labels = [EXCLUSIVE, ("reason", "not_held_at_reentry")];
    assert_eq!(counted.counter(LOCK_LOST_TOTAL, &labels), 1, "{counted:?}");
    assert_eq!(counted.counter(LOCK_ERRORS_TOTAL, &[]), 0, "{counted:?}");
    let waits = counted.samples(LOCK_WAIT_SECONDS, &[EXCLUSIVE, ("outcome", "lost")]);
    assert_eq!(waits.len(), 1, "{counted:?}");
    assert!(guard.release().await.expect_err("lost").is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_means_failed_renewals_and_an_expired_lock() {
    let _turn = take_turn().await;
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_millis(200))).await;
    let name = unique_key("telemetry-paused");
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    metrics();

    server.pause();
    within(&server, Duration::from_secs(5), "lost()", guard.lost()).await;
    server.resume();
    let lost = metrics();
    let labels = [EXCLUSIVE, ("reason", "expired")];
    assert_eq!(lost.counter(LOCK_LOST_TOTAL, &labels), 1, "{lost:?}");
    let failed = lost.samples(LOCK_RENEWAL_ROUND_TRIP_SECONDS, &[("outcome", "error")]);
    assert!(!failed.is_empty(), "{lost:?}");
    let errors = lost.counter(LOCK_ERRORS_TOTAL, &[EXCLUSIVE, ("operation", "renew")]);
    assert!(errors >= 1, "{lost:?}");
    drop(guard);
    assert_eq!(ended(&server, &name).await["outcome"], "lost");
}

/// The fields of the span the body runs in, as seen from inside.
#[distributed_lock(key = "<name>", client = locks, wait = "0s")]
async fn locked(
    locks: &lock_runtime::LockClient,
    name: &str,
) -> Result<Option<HashMap<String, String>>, LockError> {
    let current = tracing::Span::current();
    Ok(current.id().and_then(|id| spans().by_id(&id)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_of_a_locked_function_runs_in_the_lock_span() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-attribute");
    metrics();

    let inside = ok(&server, locked(&locks, &name).await).expect("inside a lock span");
    assert_eq!(inside["key"], name);
    assert_eq!(inside["kind"], "exclusive");
    assert!(inside.contains_key("fence") && !inside.contains_key("outcome"));
    let spans = spans().of(&name);
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0]["outcome"], "released");
    assert_eq!(spans[0]["fence"], inside["fence"]);
    let after = metrics();
    assert_eq!(after.counter(LOCK_ACQUIRED_TOTAL, &[EXCLUSIVE]), 1);
    assert_eq!(after.counter(LOCK_RELEASED_TOTAL, &[EXCLUSIVE]), 1);
}

#[tokio::test]
async fn every_metric_is_described_with_its_unit() {
    let _turn = take_turn().await;
    lock_runtime::describe_metrics();
    // Descriptions show once a metric has a value; give each one.
    let (server, [locks]) = start_server_with_clients().await;
    let guard = ok(&server, locks.lock(unique_key("describe")).acquire().await);
    ok(&server, guard.release().await);
    let snapshot = snapshotter().snapshot().into_vec();
    for (key, unit, description, _) in snapshot {
        let name = key.key().name().to_owned();
        if !name.starts_with("lock_") {
            continue;
        }
        assert!(description.is_some(), "{name} has no description");
        let unit = unit.unwrap_or_else(|| panic!("{name} has no unit"));
        let seconds = name.ends_with("_seconds");
        assert_eq!(unit == metrics::Unit::Seconds, seconds, "{name}: {unit:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_span_has_the_clients_level_and_the_sides_of_a_read_write_lock_are_told_apart() {
    let _turn = take_turn().await;
    let server = RedisServer::start();
    let quiet = connect(builder(&server).span_level(tracing::Level::DEBUG)).await;
    let name = unique_key("telemetry-level");
    metrics();
    let read = ok(&server, quiet.read_lock(name.as_str()).acquire().await);
    ok(&server, read.release().await);
    let span = ended(&server, &name).await;
    assert_eq!(span["level"], "DEBUG", "{span:?}");
    assert_eq!(span["kind"], "read", "{span:?}");
    let write = ok(&server, quiet.write_lock(name.as_str()).acquire().await);
    ok(&server, write.release().await);
    let after = metrics();
    for side in ["read", "write"] {
        assert_eq!(
            after.counter(LOCK_ACQUIRED_TOTAL, &[("kind", side)]),
            1,
            "{side}: {after:?}"
        );
    }
    assert_eq!(after.counter(LOCK_ACQUIRED_TOTAL, &[EXCLUSIVE]), 0);

    let default = connect(builder(&server)).await;
    let other = unique_key("telemetry-level");
    let guard = ok(&server, default.lock(other.as_str()).acquire().await);
    ok(&server, guard.release().await);
    assert_eq!(ended(&server, &other).await["level"], "INFO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_crosses_its_own_release_is_not_a_loss() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    // Short leases, held for about the time their first renewal is sent
    // (a sixth to a half of the lease, the watchdog renewing up to a sixth
    // early), by many tasks at once: renewals keep crossing releases, and
    // find locks their own guards have just deleted.
    let lease = Duration::from_millis(120);
    let (tasks, cycles) = (16u64, 40u64);
    metrics();
    let runs = (0..tasks).map(|task| {
        let locks = locks.clone();
        let name = unique_key("telemetry-crossing");
        tokio::spawn(async move {
            for cycle in 0..cycles {
                let guard = locks.lock(name.as_str()).lease(lease).acquire().await?;
                let hold = lease / 6 + lease / 3 * ((task * 7 + cycle * 3) % 16) as u32 / 16;
                tokio::time::sleep(hold).await;
                guard.release().await?;
            }
            Ok::<_, LockError>(cycles)
        })
    });
    let mut released = 0;
    for run in futures_util::future::join_all(runs).await {
        released += ok(&server, run.expect("task"));
    }
    assert_eq!(released, tasks * cycles);
    let after = metrics();
    // A lock that is not renewed in time (a starved test machine) is lost
    // as `expired`; a renewal can only find one `not_held` if something
    // deleted it, and here only its own release did.
    assert_eq!(
        after.counter(LOCK_LOST_TOTAL, &[("reason", "not_held")]),
        0,
        "{after:?}"
    );
    // Renewals did run meanwhile.
    assert!(
        !after
            .samples(LOCK_RENEWAL_ROUND_TRIP_SECONDS, &[])
            .is_empty(),
        "{after:?}"
    );
}

/// A nested guard dropped right before the last guard of its hold is
/// released: the nested one's release (one level down) reaches Redis after
/// the last one's (every level), finds the lock gone, and that is no loss:
/// the last release gave its level back too. On this single-threaded
/// runtime the dropped guard's release, spawned, always goes second.
#[tokio::test]
async fn a_nested_release_overtaken_by_the_last_one_is_no_loss() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-overtaken");
    let outer = ok(&server, locks.lock(name.as_str()).acquire().await);
    drop_nested_then_release(&server, &locks, outer, &name).await;
    let after = metrics();
    assert_eq!(after.counter(LOCK_LOST_TOTAL, &[]), 0, "{after:?}");
    for span in spans().of(&name) {
        assert_eq!(span["outcome"], "released", "{span:?}");
    }
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

/// A guard for several locks that is the last of one lock's hold while a
/// nested guard stays on another gives back one level of each: a lock it
/// finds gone then was lost, and is reported so (nothing else gave back
/// every level of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_gone_under_a_guard_for_several_with_a_nested_guard_left_is_lost() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let (a, b) = (
        unique_key("telemetry-gone-a"),
        unique_key("telemetry-gone-b"),
    );
    let both = ok(
        &server,
        locks.lock_all([a.clone(), b.clone()]).acquire().await,
    );
    let inner = both
        .scope(locks.lock(b.as_str()).acquire())
        .await
        .expect("in scope");
    let inner = ok(&server, inner);
    metrics();

    server.cli(&["DEL", &lock_key(&a)]);
    let err = both.release().await.expect_err("a was gone");
    assert!(err.is_lost(), "{err:?}");
    assert_eq!(err.key(), Some(a.as_str()));
    ok(&server, inner.release().await);
    assert_eq!(metrics().counter(LOCK_LOST_TOTAL, &[]), 1);
}

/// A lock held at least a while, whose nested guard's release (one level)
/// reaches Redis after the last guard's (every level, the lock kept until
/// its minimum): the late one finds nothing to give back, and leaves the
/// lock taken until its minimum ends. It freed the lock before.
#[tokio::test]
async fn a_nested_release_after_the_last_leaves_a_lock_held_at_least_kept() {
    let _turn = take_turn().await;
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("telemetry-kept");
    let outer = ok(
        &server,
        locks
            .lock(name.as_str())
            .lock_at_least(Duration::from_secs(20))
            .acquire()
            .await,
    );
    drop_nested_then_release(&server, &locks, outer, &name).await;
    assert_eq!(metrics().counter(LOCK_LOST_TOTAL, &[]), 0);
    let key = lock_key(&name);
    assert_eq!(server.cli(&["HGET", &key, "count"]), "0", "kept");
    let left: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
    assert!(left > 15_000, "kept for {left} ms");
}

/// Takes `name` again inside `outer`'s critical section, then drops that
/// nested guard (its release, spawned, goes after what follows on a
/// single-threaded runtime) and releases `outer`, and waits until both
/// holds' spans ended; the metrics start from zero before the drop.
async fn drop_nested_then_release(
    server: &RedisServer,
    locks: &lock_runtime::LockClient,
    outer: lock_runtime::LockGuard,
    name: &str,
) {
    let inner = outer
        .scope(locks.lock(name).acquire())
        .await
        .expect("in scope");
    let inner = ok(server, inner);
    metrics();
    drop(inner);
    ok(server, outer.release().await);
    within(server, Duration::from_secs(5), "both holds ended", async {
        while spans()
            .of(name)
            .iter()
            .filter(|s| s.contains_key("outcome"))
            .count()
            < 2
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}
