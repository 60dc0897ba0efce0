//! `rediss://` URLs: locks over TLS, against a server with a private CA
//! (the `tls-rustls-ring` feature, on in this crate's dev-dependencies).
#![cfg(feature = "tls-rustls")]

mod common;

use std::time::Duration;

use common::{ok, spawn_acquire};
use lock_runtime::LockClient;
use lock_testkit::{TlsServer, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_with_a_private_ca() {
    let TlsServer {
        server,
        url,
        certificates,
    } = TlsServer::start();
    let connect = |url: String| {
        LockClient::builder(&url)
            .tls_root_certificates(certificates.ca_pem.clone())
            .connect_timeout(Duration::from_secs(2))
            .connect()
    };
    let holder = connect(url.clone()).await.expect("connect over TLS");
    let waiter = connect(url.clone()).await.expect("connect over TLS");

    let name = unique_key("tls");
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    let waiting = spawn_acquire(waiter.lock(name.as_str()).wait(Duration::from_secs(10)));
    // Renewed over TLS past its lease, then handed over through pub/sub.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiting.is_finished() && !guard.is_lost());
    ok(&server, guard.release().await);
    let next = ok(&server, waiting.await.unwrap().1);
    ok(&server, next.release().await);

    // Without the CA the server's certificate is not trusted.
    let untrusted = LockClient::builder(&url)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await;
    assert!(untrusted.is_err());
}
