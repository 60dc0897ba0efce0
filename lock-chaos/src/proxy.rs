//! A TCP proxy on loopback between the clients and Redis that can delay
//! traffic and cut connections on command.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[derive(Debug)]
struct Control {
    delay_ms: AtomicU64,
    refuse: AtomicBool,
    cut: watch::Sender<u64>,
    connections: AtomicU64,
}

/// The running proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    addr: SocketAddr,
    control: Arc<Control>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Proxy {
            addr: listener.local_addr()?,
            control: Arc::new(Control {
                delay_ms: AtomicU64::new(0),
                refuse: AtomicBool::new(false),
                cut: watch::Sender::new(0),
                connections: AtomicU64::new(0),
            }),
        };
        let control = proxy.control.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if control.refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                control.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(client, upstream, control.clone()));
            }
        });
        Ok(proxy)
    }

    /// The URL clients use.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Delays every chunk read from now on by `delay` in each direction.
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.control.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Closes every proxied connection now.
    pub fn cut(&self) {
        self.control.cut.send_modify(|epoch| *epoch += 1);
    }

    /// While set, new connections are accepted and closed at once.
    pub fn set_refuse(&self, refuse: bool) {
        self.control.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Connections proxied so far.
    pub fn connections(&self) -> u64 {
        self.control.connections.load(Ordering::Relaxed)
    }
}

async fn relay(client: TcpStream, upstream: u16, control: Arc<Control>) {
    let mut cut = control.cut.subscribe();
    cut.mark_unchanged();
    let server = tokio::select! {
        server = TcpStream::connect(("127.0.0.1", upstream)) => server,
        _ = cut.changed() => return,
    };
    let Ok(server) = server else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pump(client_read, server_write, &control) => {}
        _ = pump(server_read, client_write, &control) => {}
        _ = cut.changed() => {}
    }
    // Dropping both halves of both sockets closes both connections.
}

/// Copies one direction, holding each chunk back by the delay in force when
/// it was read. Chunks keep their order.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, control: &Control) {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let delay = Duration::from_millis(control.delay_ms.load(Ordering::SeqCst));
                    if queue
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    };
    let writing = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}
