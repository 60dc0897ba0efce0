//! Two clients contend for one lock: who holds it, the fencing tokens, the
//! renewals that keep a short lease alive, and the handoff on release.
//!
//! Uses `REDIS_URL` when set; otherwise starts a private `redis-server` on a
//! free port. Run it with `bash scripts/demo`, or `cargo run --example quickstart`.

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), LockError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("lock_runtime=debug")),
        )
        .with_target(false)
        .init();

    // Keep the private server (if any) alive until the end of main.
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = lock_testkit::RedisServer::start();
            let url = server.url();
            println!("started a private redis-server at {url}");
            (Some(server), url)
        }
    };

    let alice = LockClient::connect(&url).await?;
    let bob = LockClient::connect(&url).await?;
    let lease = Duration::from_secs(1);

    let guard = alice.lock("report:daily").lease(lease).acquire().await?;
    println!(
        "alice holds report:daily with fencing token {} (lease {lease:?})",
        guard.fence()
    );

    let bob_waits = {
        let bob = bob.clone();
        tokio::spawn(async move {
            println!("bob asks for report:daily and waits");
            let guard = bob
                .lock("report:daily")
                .lease(lease)
                .wait(Duration::from_secs(30))
                .acquire()
                .await?;
            Ok::<_, LockError>((Instant::now(), guard))
        })
    };

    // Alice works for three leases; the watchdog renews her lock every
    // lease/3, so Bob keeps waiting and her validity deadline moves on.
    for second in 1..=3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let left = guard
            .valid_until()
            .saturating_duration_since(Instant::now());
        println!("alice, {second}s in: still holding, surely valid for another {left:?}");
    }
    let try_now = bob
        .lock("report:daily")
        .wait(Duration::ZERO)
        .acquire()
        .await;
    println!(
        "bob tries once while alice holds it: {}",
        try_now.err().map_or("acquired?!".into(), |e| e.to_string())
    );

    let released_at = Instant::now();
    guard.release().await?;
    println!("alice released report:daily");

    let (acquired_at, bobs) = bob_waits.await.expect("bob's task")?;
    println!(
        "bob holds report:daily {:?} after the release, fencing token {} (> alice's)",
        acquired_at - released_at,
        bobs.fence()
    );
    bobs.release().await?;
    println!("bob released it; done");
    Ok(())
}
