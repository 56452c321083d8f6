//! TLS to PostgreSQL, against a private server with a certificate signed by
//! a test CA for 127.0.0.1: `verify-full` with that CA connects (and the
//! session is encrypted), `verify-full` with the system's roots is refused,
//! `require` encrypts without checking, and a certificate for another name
//! passes `verify-ca` but not `verify-full`.

use super::super::{CallStore, Database, Scope, StoreOptions};
use crate::temp::postgres::PgServer;
use crate::temp::TempDir;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::path::PathBuf;

/// A server whose certificate names `names`, signed by a new CA; the CA's
/// PEM file.
fn server_with_tls(names: &[&str]) -> (PgServer, PathBuf, TempDir) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "idempotent-tool test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();

    let server = PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    server
        .install_file("server.crt", cert.pem().as_bytes(), 0o644)
        .unwrap();
    server
        .install_file("server.key", key.serialize_pem().as_bytes(), 0o600)
        .unwrap();
    let mut admin = server.connect_admin();
    admin.batch_execute("ALTER SYSTEM SET ssl = on").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let folder = TempDir::new("idem-pg-ca").unwrap();
    let ca_file = folder.join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    (server, ca_file, folder)
}

fn open(url: &str, ca_file: Option<&PathBuf>) -> Result<std::sync::Arc<CallStore>, String> {
    let options = StoreOptions {
        ca_file: ca_file.cloned(),
        ..StoreOptions::default()
    };
    CallStore::open(&Database::parse(url).unwrap(), options).map_err(|e| e.to_string())
}

/// Encrypted sessions the server sees from the store's pool.
fn encrypted_sessions(server: &PgServer) -> i64 {
    server
        .connect_admin()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
              WHERE s.ssl AND a.application_name = 'idempotent-tool'",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn verify_full_needs_the_right_ca_and_require_encrypts_without_one() {
    let (server, ca_file, _folder) = server_with_tls(&["127.0.0.1"]);
    let url = server.fresh_database("tls");
    // Reload is asynchronous: wait until the server offers TLS.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let full = format!("{url}?sslmode=verify-full");
    let store = loop {
        match open(&full, Some(&ca_file)) {
            Ok(store) => break store,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            Err(e) => panic!("verify-full with the CA: {e}\n{}", server.log()),
        }
    };
    store.stats(Scope::All).unwrap();
    assert!(encrypted_sessions(&server) >= 1);
    store.stop();

    let refused = open(&full, None)
        .err()
        .expect("the system's roots do not know our CA");
    assert!(!refused.contains(server.password()), "{refused}");
    let require = open(&format!("{url}?sslmode=require"), None).expect("require");
    require.stats(Scope::All).unwrap();
    require.stop();
}

#[test]
fn verify_ca_checks_the_chain_but_not_the_name() {
    let (server, ca_file, _folder) = server_with_tls(&["db.example"]);
    let url = server.fresh_database("tls_name");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let ca = format!("{url}?sslmode=verify-ca");
    let store = loop {
        match open(&ca, Some(&ca_file)) {
            Ok(store) => break store,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            Err(e) => panic!("verify-ca: {e}\n{}", server.log()),
        }
    };
    store.stop();
    let wrong_name = open(&format!("{url}?sslmode=verify-full"), Some(&ca_file));
    assert!(wrong_name.is_err(), "127.0.0.1 is not db.example");
}
