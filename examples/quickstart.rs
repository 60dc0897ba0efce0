//! Two clients contend for one lock: who holds it, the fencing tokens, the
//! renewals that keep a short lease alive, and the handoff on release. It
//! checks each step as it tells it, and fails if one goes otherwise.
//!
//! Uses `REDIS_URL` when set; otherwise starts a private `redis-server` on a
//! free port. Run it with `bash scripts/demo`, or `cargo run --example quickstart`.
//! The library's own log (on stderr) shows only warnings unless `RUST_LOG`
//! asks for more: `RUST_LOG=lock_runtime=debug` shows every acquisition,
//! renewal and release.

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError};
use tracing_subscriber::EnvFilter;

const LOCK: &str = "report:daily";

#[tokio::main]
async fn main() -> Result<(), LockError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();

    // Keep the private server (if any) alive until the end of main.
    let (_server, url, whose) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url, "the server of REDIS_URL"),
        Err(_) => {
            let server = lock_testkit::RedisServer::start();
            let url = server.url();
            (Some(server), url, "a private redis-server")
        }
    };
    let lease = Duration::from_secs(1);
    println!("Two clients, alice and bob, want the lock `{LOCK}` (lease {lease:?})");
    println!("on {whose} at {url}.");

    let alice = LockClient::connect(&url).await?;
    let bob = LockClient::connect(&url).await?;

    let guard = alice.lock(LOCK).lease(lease).acquire().await?;
    println!("1. alice takes it: fencing token {}.", guard.fence());

    let asked = Instant::now();
    let bob_waits = {
        let request = bob.lock(LOCK).lease(lease).wait(Duration::from_secs(30));
        tokio::spawn(async move {
            let guard = request.acquire().await?;
            Ok::<_, LockError>((Instant::now(), guard))
        })
    };
    println!("2. bob asks for it, ready to wait up to 30s.");

    // Alice works for three leases; the watchdog renews her lock every
    // lease/3, so it stays hers and Bob keeps waiting.
    let work = 3 * lease;
    tokio::time::sleep(work).await;
    let left = guard
        .valid_until()
        .saturating_duration_since(Instant::now());
    assert!(!guard.is_lost() && left > Duration::ZERO, "alice lost it");
    assert!(!bob_waits.is_finished(), "bob got the lock alice holds");
    println!(
        "3. alice works for {work:?}, three times her lease: the watchdog renews it in the\n   \
         background, so it is still hers (surely for {} more) and bob still waits.",
        short(left)
    );

    let Err(refused) = bob.lock(LOCK).wait(Duration::ZERO).acquire().await else {
        panic!("bob took the lock alice holds");
    };
    assert!(refused.is_timeout(), "{refused}");
    println!("4. bob tries once more without waiting: {refused}.");

    let alices = guard.fence();
    let released_at = Instant::now();
    guard.release().await?;
    let (acquired_at, bobs) = bob_waits.await.expect("bob's task")?;
    assert!(bobs.fence() > alices, "bob's token does not follow alice's");
    println!(
        "5. alice releases it; bob, woken by the release, holds it {} later, having waited {}:",
        short(acquired_at - released_at),
        short(acquired_at - asked)
    );
    println!(
        "   fencing token {}, greater than alice's, so a store can refuse her late writes.",
        bobs.fence()
    );
    bobs.release().await?;
    println!("6. bob releases it. Done.");
    if std::env::var_os("RUST_LOG").is_none() {
        println!("(RUST_LOG=lock_runtime=debug shows the library's own log of each step.)");
    }
    Ok(())
}

/// A duration rounded for reading: `652.4ms`, `3.01s`.
fn short(duration: Duration) -> String {
    if duration >= Duration::from_secs(1) {
        format!("{:.2}s", duration.as_secs_f64())
    } else {
        format!("{:.1}ms", duration.as_secs_f64() * 1000.0)
    }
}
