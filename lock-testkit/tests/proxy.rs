//! The proxy against a real `redis-server`: relaying, delay, cut, refusal
//! and the black hole.

use std::time::{Duration, Instant};

use lock_testkit::{Proxy, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";

/// Reads exactly `expected.len()` bytes within `limit` and checks them.
async fn expect_reply(stream: &mut TcpStream, expected: &[u8], limit: Duration) {
    let mut buf = vec![0u8; expected.len()];
    tokio::time::timeout(limit, stream.read_exact(&mut buf))
        .await
        .expect("a reply within the limit")
        .expect("the connection stays open");
    assert_eq!(
        String::from_utf8_lossy(&buf),
        String::from_utf8_lossy(expected)
    );
}

/// Asserts that nothing arrives within `quiet`, and that the connection was
/// neither closed (read of 0 bytes) nor reset (error) meanwhile.
async fn expect_silence(stream: &mut TcpStream, quiet: Duration) {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(quiet, stream.read(&mut byte)).await {
        Err(_) => {}
        Ok(Ok(0)) => panic!("the connection was closed"),
        Ok(Ok(_)) => panic!("a reply came through: {:?}", byte[0] as char),
        Ok(Err(err)) => panic!("the connection failed: {err}"),
    }
}

async fn connect(proxy: &Proxy) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("the proxy accepts");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

#[tokio::test]
async fn relays_commands() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn blackhole_holds_traffic_without_closing_and_lets_it_through_after() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;

    proxy.blackhole(true);
    stream.write_all(PING).await.unwrap();
    expect_silence(&mut stream, Duration::from_millis(300)).await;
    // Still silent, still open.
    expect_silence(&mut stream, Duration::from_millis(200)).await;

    let lifted = Instant::now();
    proxy.blackhole(false);
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    assert!(lifted.elapsed() < Duration::from_secs(1));
    // The same connection goes on working.
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn blackhole_holds_what_the_server_sends_too() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let mut subscriber = connect(&proxy).await;
    subscriber
        .write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n")
        .await
        .unwrap();
    let confirmation = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    expect_reply(&mut subscriber, confirmation, Duration::from_secs(5)).await;

    proxy.blackhole(true);
    // Published directly, not through the proxy: only the push to the
    // subscriber crosses the black hole.
    assert_eq!(server.cli(&["PUBLISH", "ch", "hello"]), "1");
    expect_silence(&mut subscriber, Duration::from_millis(300)).await;

    proxy.blackhole(false);
    let message = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n";
    expect_reply(&mut subscriber, message, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn connections_opened_during_a_blackhole_reach_the_server_after_it() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    proxy.blackhole(true);
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_silence(&mut stream, Duration::from_millis(300)).await;
    let clients = server.cli(&["CLIENT", "LIST"]);
    assert_eq!(
        clients.lines().count(),
        1,
        "only this CLIENT LIST's own connection reached the server: {clients}"
    );

    proxy.blackhole(false);
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn a_cut_closes_connections_even_in_a_blackhole() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    proxy.blackhole(true);
    proxy.cut();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
        .await
        .expect("the cut closes the connection at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

#[tokio::test]
async fn refused_connections_are_closed_and_not_counted() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    proxy.set_refuse(true);
    let mut stream = connect(&proxy).await;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
        .await
        .expect("a refused connection is closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(proxy.connections(), 0);

    proxy.set_refuse(false);
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn delay_holds_replies_back() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let mut stream = connect(&proxy).await;
    proxy.set_delay(Duration::from_millis(150));
    let sent = Instant::now();
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    // 150 ms on the way there, 150 ms on the way back.
    assert!(
        sent.elapsed() >= Duration::from_millis(290),
        "{:?}",
        sent.elapsed()
    );
    proxy.set_delay(Duration::ZERO);
}

#[tokio::test]
async fn dropping_the_last_handle_closes_everything() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let port = proxy.port();
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    let clone = proxy.clone();
    drop(proxy);
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;
    drop(clone);
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
        .await
        .expect("the connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Stopped listening: nothing more is relayed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    if let Ok(mut late) = TcpStream::connect(("127.0.0.1", port)).await {
        let _ = late.write_all(PING).await;
        let read = tokio::time::timeout(Duration::from_secs(1), late.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    }
}

#[tokio::test]
async fn blackhole_stops_reading_so_the_sender_blocks() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let mut stream = connect(&proxy).await;
    stream.write_all(PING).await.unwrap();
    expect_reply(&mut stream, PONG, Duration::from_secs(5)).await;

    // One `SET` of 32 MiB: far more than the socket buffers hold.
    let value = vec![b'x'; 32 << 20];
    let mut command = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n", value.len()).into_bytes();
    command.extend_from_slice(&value);
    command.extend_from_slice(b"\r\n");
    proxy.blackhole(true);
    let (mut read, mut write) = stream.into_split();
    let sending = tokio::spawn(async move {
        write.write_all(&command).await.unwrap();
        write
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!sending.is_finished(), "the proxy went on reading");

    proxy.blackhole(false);
    let _write = tokio::time::timeout(Duration::from_secs(10), sending)
        .await
        .expect("the rest is read once the black hole is lifted")
        .unwrap();
    let mut reply = [0u8; 5];
    tokio::time::timeout(Duration::from_secs(10), read.read_exact(&mut reply))
        .await
        .expect("a reply")
        .unwrap();
    assert_eq!(&reply, b"+OK\r\n");
    assert_eq!(server.cli(&["STRLEN", "big"]), (32 << 20).to_string());
}

#[tokio::test]
async fn stranded_connections_go_dead_and_new_ones_get_through() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy starts");
    let mut old = connect(&proxy).await;
    old.write_all(PING).await.unwrap();
    expect_reply(&mut old, PONG, Duration::from_secs(5)).await;

    proxy.strand();
    old.write_all(PING).await.unwrap();
    expect_silence(&mut old, Duration::from_millis(300)).await;

    let mut new = connect(&proxy).await;
    new.write_all(PING).await.unwrap();
    expect_reply(&mut new, PONG, Duration::from_secs(5)).await;
    // For good: the old connection stays silent, and open.
    expect_silence(&mut old, Duration::from_millis(300)).await;
    assert_eq!(proxy.connections(), 2);

    // A cut still closes it.
    proxy.cut();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), old.read(&mut byte))
        .await
        .expect("the cut closes the stranded connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}
