//! A private certificate authority and a `redis-server` that speaks TLS
//! with a certificate it signed, for tests of `rediss://` clients.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};

use crate::server::{RedisServer, free_port};

/// PEM files of a fresh CA and of a server certificate it signed for
/// `localhost` and 127.0.0.1, in a temporary directory removed on drop.
pub struct Certificates {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The CA certificate's file.
    pub ca: PathBuf,
    /// The server certificate's file.
    pub cert: PathBuf,
    /// The server key's file.
    pub key: PathBuf,
    _dir: tempfile::TempDir,
}

impl Certificates {
    /// Generates the CA and the server certificate.
    pub fn generate() -> Certificates {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca =
            CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        server_params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        let server_key = KeyPair::generate().expect("key");
        let server_cert = server_params
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        let dir = tempfile::tempdir().expect("temporary directory");
        let certificates = Certificates {
            ca_pem: ca.pem(),
            ca: dir.path().join("ca.crt"),
            cert: dir.path().join("server.crt"),
            key: dir.path().join("server.key"),
            _dir: dir,
        };
        std::fs::write(&certificates.ca, ca.pem()).expect("write");
        std::fs::write(&certificates.cert, server_cert.pem()).expect("write");
        std::fs::write(&certificates.key, server_key.serialize_pem()).expect("write");
        certificates
    }
}

/// A `redis-server` with a TLS port as well as its plain one (which the
/// test kit's readiness checks use), and the `rediss://` URL of the TLS
/// port. Clients need not present certificates.
pub struct TlsServer {
    /// The server (its `url()` is the plain port's).
    pub server: RedisServer,
    /// `rediss://` on the TLS port.
    pub url: String,
    /// What the server's certificate was signed with.
    pub certificates: Certificates,
}

impl TlsServer {
    /// Starts a server with freshly generated certificates.
    pub fn start() -> TlsServer {
        let certificates = Certificates::generate();
        let path = |path: &PathBuf| path.to_str().expect("UTF-8 path").to_owned();
        let tls_port = free_port().to_string();
        let server = RedisServer::start_with(&[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &path(&certificates.cert),
            "--tls-key-file",
            &path(&certificates.key),
            "--tls-ca-cert-file",
            &path(&certificates.ca),
            "--tls-auth-clients",
            "no",
        ]);
        TlsServer {
            server,
            url: format!("rediss://127.0.0.1:{tls_port}/"),
            certificates,
        }
    }
}
