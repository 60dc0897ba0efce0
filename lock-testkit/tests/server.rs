//! Tests against real `redis-server` processes.

use std::time::Duration;

use lock_testkit::{RedisServer, free_port, unique_key};

#[test]
fn ping() {
    let server = RedisServer::start();
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.pid() > 0);
    assert!(server.log().contains("Ready to accept connections"));
}

#[test]
fn set_get_round_trip() {
    let server = RedisServer::start();
    let key = unique_key("roundtrip");
    assert_eq!(server.cli(&["GET", &key]), "(nil)");
    assert_eq!(server.cli(&["SET", &key, "hello world"]), "OK");
    assert_eq!(server.cli(&["GET", &key]), "hello world");
    assert_eq!(server.cli(&["INCR", "counter"]), "1");
    assert_eq!(server.cli(&["RPUSH", "list", "a", "b"]), "2");
    assert_eq!(server.cli(&["LRANGE", "list", "0", "-1"]), "a\nb");
    assert!(server.cli(&["INCR", &key]).starts_with("ERR "));
    assert!(
        server
            .cli(&["NOSUCHCOMMAND"])
            .starts_with("ERR unknown command")
    );
}

#[test]
fn pause_and_resume() {
    let server = RedisServer::start();
    server.pause();
    let reply = server.try_cli(&["PING"], Duration::from_millis(200));
    assert!(reply.is_err(), "paused server answered: {reply:?}");
    server.resume();
    assert_eq!(
        server
            .try_cli(&["PING"], Duration::from_secs(5))
            .expect("resumed server answers"),
        "PONG"
    );
}

#[test]
fn restart_keeps_port_and_loses_data() {
    let mut server = RedisServer::start();
    let port = server.port();
    let old_pid = server.pid();
    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");
    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert_eq!(server.cli(&["GET", "k"]), "(nil)");
    assert_eq!(server.cli(&["DBSIZE"]), "0");
}

#[test]
fn restart_after_save_goes_back_to_the_snapshot() {
    let mut server = RedisServer::start();
    assert_eq!(server.cli(&["SET", "counter", "5"]), "OK");
    assert_eq!(server.cli(&["SAVE"]), "OK");
    assert!(server.dir().join("dump.rdb").exists());
    assert_eq!(server.cli(&["INCR", "counter"]), "6");
    assert_eq!(server.cli(&["SET", "later", "x"]), "OK");
    server.restart();
    assert_eq!(server.cli(&["GET", "counter"]), "5");
    assert_eq!(server.cli(&["GET", "later"]), "(nil)");
    std::fs::remove_file(server.dir().join("dump.rdb")).unwrap();
    server.restart();
    assert_eq!(server.cli(&["DBSIZE"]), "0");
}

#[test]
fn restart_a_paused_server() {
    let mut server = RedisServer::start();
    server.pause();
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn kill_then_drop() {
    let mut server = RedisServer::start();
    let port = server.port();
    server.kill();
    server.kill();
    assert!(
        server
            .try_cli(&["PING"], Duration::from_millis(500))
            .is_err()
    );
    // Killing a paused server works too.
    let paused = RedisServer::start();
    paused.pause();
    drop(paused);
    drop(server);
    // The port is free again.
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("port released");
}

#[test]
fn restart_after_kill() {
    let mut server = RedisServer::start();
    server.kill();
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn servers_get_different_ports() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    assert_eq!(a.cli(&["SET", "k", "a"]), "OK");
    assert_eq!(b.cli(&["GET", "k"]), "(nil)");
}

#[test]
fn requirepass_is_used_by_cli() {
    let mut server = RedisServer::start_with(&["--requirepass", "pw"]);
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cli(&["GET", "k"]), "v");
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn extra_args_are_applied() {
    let server = RedisServer::start_with(&["--maxmemory", "12345678"]);
    assert_eq!(
        server.cli(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n12345678"
    );
    assert_eq!(server.cli(&["CONFIG", "GET", "save"]), "save\n");
    assert_eq!(
        server.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
}

#[test]
fn restart_waits_for_a_taken_port() {
    // A port held by someone else makes `restart` wait; it succeeds once the
    // port is released.
    let mut server = RedisServer::start();
    let port = server.port();
    server.kill();
    let holder = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    server.restart();
    release.join().unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
#[should_panic(expected = "failed to start")]
fn bad_args_panic_with_log() {
    let _server = RedisServer::start_with(&["--no-such-option", "1"]);
}

#[test]
fn free_ports_and_unique_keys() {
    assert_ne!(free_port(), 0);
    assert_ne!(unique_key("a"), unique_key("a"));
}
