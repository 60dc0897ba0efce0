//! `rediss://` URLs: locks over TLS, against a server with a private CA.

mod common;

use std::time::Duration;

use common::{ok, spawn_acquire};
use lock_runtime::LockClient;
use lock_testkit::{RedisServer, free_port, unique_key};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};

struct Tls {
    dir: tempfile::TempDir,
    ca_pem: String,
}

/// A CA and a server certificate for 127.0.0.1, written as PEM files.
fn certificates() -> Tls {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let mut server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server_params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let server_key = KeyPair::generate().unwrap();
    let server_cert = server_params.signed_by(&server_key, &ca).unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("server.crt"), server_cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), server_key.serialize_pem()).unwrap();
    Tls {
        ca_pem: ca.pem(),
        dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_with_a_private_ca() {
    let tls = certificates();
    let path = |file: &str| tls.dir.path().join(file).to_string_lossy().into_owned();
    let tls_port = free_port().to_string();
    // The plain port stays open for the test kit's readiness checks.
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &path("server.crt"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let connect = |url: String| {
        LockClient::builder(&url)
            .tls_root_certificates(tls.ca_pem.clone())
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
