//! Mutual exclusion under contention, with fencing tokens in holder order.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{lock_key, ok, start_server_with_clients};
use lock_testkit::unique_key;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clients_and_sixteen_tasks_never_overlap() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 25;
    let (server, clients) = start_server_with_clients::<2>().await;
    let name = unique_key("exclusion");
    let counter = Arc::new(std::sync::Mutex::new(0u64));
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let locks = clients[task % 2].clone();
        let (name, counter, inside, overlaps, fences) = (
            name.clone(),
            counter.clone(),
            inside.clone(),
            overlaps.clone(),
            fences.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locks
                    .lock(name.as_str())
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences.lock().unwrap().push(guard.fence());
                // Read, yield, write: only exclusion keeps this exact.
                let seen = *counter.lock().unwrap();
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(200)).await;
                *counter.lock().unwrap() = seen + 1;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
            }
            Ok::<_, lock_runtime::LockError>(())
        }));
    }
    for task in tasks {
        ok(&server, task.await.expect("task panicked"));
    }

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two bodies overlapped");
    assert_eq!(*counter.lock().unwrap(), (TASKS * ROUNDS) as u64);
    let fences = fences.lock().unwrap();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must grow with each holder: {fences:?}"
    );
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_counters_stay_bounded_over_many_lock_names() {
    let (server, [locks]) = start_server_with_clients().await;
    let mut last_fence = std::collections::HashMap::new();
    for round in 0..2 {
        for id in 0..300 {
            // One tenant's orders share a hash slot, and so a counter.
            let name = format!("{{tenant:1}}:order:{id}");
            let guard = ok(&server, locks.lock(name.as_str()).acquire().await);
            if round == 1 {
                assert!(
                    guard.fence() > last_fence[&id],
                    "token went backwards for {name}"
                );
            }
            last_fence.insert(id, guard.fence());
            ok(&server, guard.release().await);
        }
    }
    // 300 lock names leave no lock keys behind and one fencing counter
    // (and, on a server this young, the counter's restart-quarantine marker,
    // which expires with the quarantine: see prelude.lua).
    let all = server.cli(&["KEYS", "*"]);
    let (markers, keys): (Vec<&str>, Vec<&str>) =
        all.lines().partition(|key| key.ends_with(":born"));
    assert_eq!(keys.len(), 1, "{all}");
    assert!(keys[0].starts_with("lock:fence:{"), "{all}");
    assert_eq!(server.cli(&["TTL", keys[0]]), "-1");
    for marker in markers {
        assert_eq!(marker, format!("{}:born", keys[0]));
        assert_ne!(
            server.cli(&["PTTL", marker]),
            "-1",
            "{marker} never expires"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_above_a_counter_ahead_of_the_clock() {
    // Tokens follow the server's clock in microseconds; a counter ahead of
    // it (a clock set back since, or a counter raised by a Redlock majority
    // whose master's clock runs ahead) must still be counted on from.
    let (server, [locks]) = start_server_with_clients().await;
    let name = "{tenant:2}:order";
    let first = ok(&server, locks.lock(name).acquire().await);
    ok(&server, first.release().await);
    let all = server.cli(&["KEYS", "lock:fence:*"]);
    let counter = all
        .lines()
        .find(|key| !key.ends_with(":born"))
        .unwrap_or_else(|| panic!("no fencing counter among {all}"))
        .to_owned();
    // Well ahead of any clock reading in microseconds (2026 is about
    // 1.8e15), and below 2^53, where Lua's numbers stop being exact.
    let ahead: u64 = 5_000_000_000_000_000;
    assert_eq!(server.cli(&["SET", &counter, &ahead.to_string()]), "OK");
    for step in 1..=2 {
        let guard = ok(&server, locks.lock(name).acquire().await);
        assert_eq!(guard.fence(), ahead + step, "token {step} after the raise");
        ok(&server, guard.release().await);
    }
    assert_eq!(server.cli(&["GET", &counter]), (ahead + 2).to_string());
}
