//! [`Proxy`]: a TCP proxy on loopback between clients and one Redis server
//! that can delay traffic, cut connections, refuse new ones, and black-hole
//! everything (a network partition that neither closes nor resets).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Size of one read from either side.
const CHUNK: usize = 16 * 1024;

/// What the proxy's tasks share with its handles.
#[derive(Debug)]
struct Control {
    /// Delay applied to every chunk read from now on, in milliseconds.
    delay_us: AtomicU64,
    /// Whether new connections are closed at once.
    refuse: AtomicBool,
    /// Bumped by [`Proxy::cut`]: every relay alive then closes.
    cut: watch::Sender<u64>,
    /// Whether nothing is relayed ([`Proxy::blackhole`]).
    blackhole: watch::Sender<bool>,
    /// Bumped by [`Proxy::strand`]: connections accepted before go dead.
    strand: watch::Sender<u64>,
    /// Set once the last [`Proxy`] handle is dropped: everything closes.
    stopped: watch::Sender<bool>,
    /// Connections accepted and relayed so far.
    connections: AtomicU64,
}

impl Control {
    /// Returns once traffic of a connection accepted in strand epoch `born`
    /// may pass: at once unless a black hole is in force, never once the
    /// connection is stranded.
    async fn passable(&self, born: u64) {
        let mut blackhole = self.blackhole.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = blackhole.wait_for(|on| !*on).await;
        if *self.strand.borrow() != born {
            std::future::pending::<()>().await;
        }
    }
}

/// Returns once the proxy is stopped.
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    // `Ref` is not `Send`: drop it here, not across an await of the caller.
    let _ = stopped.wait_for(|stopped| *stopped).await;
}

/// Stops the proxy when the last [`Proxy`] handle goes.
#[derive(Debug)]
struct StopOnDrop(Arc<Control>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stopped.send_replace(true);
    }
}

/// A TCP proxy on a free `127.0.0.1` port, forwarding to one upstream port
/// on `127.0.0.1` (typically a [`RedisServer`](crate::RedisServer)'s), that
/// tests use to put faults between a client and Redis:
///
/// - [`set_delay`](Proxy::set_delay): every chunk is held back for a while,
///   in both directions, in order;
/// - [`cut`](Proxy::cut): every proxied connection is closed at once;
/// - [`set_refuse`](Proxy::set_refuse): new connections are accepted and
///   closed at once;
/// - [`blackhole`](Proxy::blackhole): nothing gets through in either
///   direction and nothing is closed, as in a network partition;
/// - [`strand`](Proxy::strand): the connections open now go dead for good
///   without being closed, while new ones get through (a NAT or load
///   balancer that forgot them, a peer that moved).
///
/// The proxy runs as tasks on the Tokio runtime that called
/// [`Proxy::start`] (which needs the `net`, `time` and `io-util` drivers,
/// i.e. a runtime built with `enable_all`, as `#[tokio::test]` does), and
/// stops with it. Handles are cheap clones of one proxy; when the last one
/// is dropped, the proxy stops listening and closes every connection.
///
/// Each accepted client connection gets its own upstream connection, opened
/// when the client connects (or, during a black hole, once it is lifted).
/// When either side closes, both connections are closed.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_testkit::{Proxy, RedisServer};
///
/// # async fn run() -> std::io::Result<()> {
/// let server = RedisServer::start();
/// let proxy = Proxy::start(server.port()).await?;
/// let url = proxy.url(); // give this to the client under test
///
/// proxy.blackhole(true); // the client's commands get no answer...
/// tokio::time::sleep(Duration::from_secs(2)).await;
/// proxy.blackhole(false); // ...until now, on the same connections
/// # drop(url);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Proxy {
    addr: SocketAddr,
    control: Arc<Control>,
    _stop: Arc<StopOnDrop>,
}

impl Proxy {
    /// Listens on a free `127.0.0.1` port and forwards every connection to
    /// `127.0.0.1:upstream`.
    ///
    /// # Errors
    ///
    /// When the listening socket cannot be bound.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime.
    pub async fn start(upstream: u16) -> io::Result<Proxy> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let control = Arc::new(Control {
            delay_us: AtomicU64::new(0),
            refuse: AtomicBool::new(false),
            cut: watch::Sender::new(0),
            blackhole: watch::Sender::new(false),
            strand: watch::Sender::new(0),
            stopped: watch::Sender::new(false),
            connections: AtomicU64::new(0),
        });
        let proxy = Proxy {
            addr: listener.local_addr()?,
            control: control.clone(),
            _stop: Arc::new(StopOnDrop(control.clone())),
        };
        tokio::spawn(accept(listener, upstream, control));
        Ok(proxy)
    }

    /// The URL clients use: `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The port the proxy listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Holds every chunk read from now on back by `delay`, in each
    /// direction; chunks keep their order. `Duration::ZERO` ends the delay
    /// for chunks read from then on. Held to within tens of microseconds
    /// (see `wait_until`).
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.control.delay_us.store(us, Ordering::SeqCst);
    }

    /// Closes every proxied connection now, on both sides (including those
    /// held by a black hole); later connections are not affected.
    pub fn cut(&self) {
        self.control.cut.send_modify(|epoch| *epoch += 1);
    }

    /// While `true`, new connections are accepted and closed at once;
    /// connections already open are not affected.
    pub fn set_refuse(&self, refuse: bool) {
        self.control.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Turns the black hole on or off.
    ///
    /// While it is on, nothing is relayed in either direction and no
    /// connection is closed (no FIN, no RST): the proxy stops reading, so
    /// bytes wait in the TCP buffers, which fill up as in a real partition,
    /// and a chunk it had already read waits with them. New connections are
    /// accepted but not connected to the upstream until the black hole is
    /// lifted. Once it is off, everything that waited flows on, in order, on
    /// the same connections. A side that closed meanwhile is seen closed
    /// only then.
    pub fn blackhole(&self, on: bool) {
        self.control.blackhole.send_replace(on);
    }

    /// Makes every connection open now go dead for good: from now on nothing
    /// it carries is relayed, in either direction, and it is not closed
    /// (until [`cut`](Proxy::cut) or the proxy is dropped), as with a
    /// black hole that is never lifted. Connections accepted afterwards are
    /// relayed as usual.
    pub fn strand(&self) {
        self.control.strand.send_modify(|epoch| *epoch += 1);
    }

    /// Connections accepted and relayed so far (not those refused).
    pub fn connections(&self) -> u64 {
        self.control.connections.load(Ordering::Relaxed)
    }
}

/// Accepts connections until the proxy is dropped.
async fn accept(listener: TcpListener, upstream: u16, control: Arc<Control>) {
    let mut stopped = control.stopped.subscribe();
    loop {
        let client = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                // E.g. too many open files: try again shortly.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = until_stopped(&mut stopped) => return,
        };
        if control.refuse.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        control.connections.fetch_add(1, Ordering::Relaxed);
        let born = *control.strand.borrow();
        tokio::spawn(relay(client, upstream, control.clone(), born));
    }
}

/// Relays one client connection until either side closes, the proxy cuts
/// it, or the proxy stops.
async fn relay(client: TcpStream, upstream: u16, control: Arc<Control>, born: u64) {
    let mut cut = control.cut.subscribe();
    cut.mark_unchanged();
    let mut stopped = control.stopped.subscribe();
    let ended = async move {
        tokio::select! {
            _ = cut.changed() => {}
            _ = until_stopped(&mut stopped) => {}
        }
    };
    tokio::select! {
        _ = connected(client, upstream, &control, born) => {}
        _ = ended => {}
    }
    // Dropping both halves of both sockets closes both connections.
}

async fn connected(client: TcpStream, upstream: u16, control: &Control, born: u64) {
    // A new connection waits for the black hole to be lifted before it
    // reaches the upstream.
    control.passable(born).await;
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pump(client_read, server_write, control, born) => {}
        _ = pump(server_read, client_write, control, born) => {}
    }
}

/// Waits until `due`, to within the kernel's timer slack rather than
/// Tokio's millisecond tick: the last millisecond is slept on a blocking
/// thread, so that a delay below a millisecond (a network within a region)
/// is held for what it says.
async fn wait_until(due: Instant) {
    const TICK: Duration = Duration::from_millis(1);
    if due.saturating_duration_since(Instant::now()) > 2 * TICK {
        tokio::time::sleep_until(due - TICK).await;
    }
    let left = due.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

/// Copies one direction, holding each chunk back by the delay in force when
/// it was read, and holding everything while a black hole is on (and for
/// good once the connection is stranded). Chunks keep their order.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, control: &Control, born: u64) {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let reading = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            // Not reading while black-holed lets the sender's buffers fill.
            control.passable(born).await;
            let read = from.read(&mut buf).await;
            // What was read (or the end) waits for the black hole too.
            control.passable(born).await;
            let delay = Duration::from_micros(control.delay_us.load(Ordering::SeqCst));
            let chunk = match read {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(buf[..n].to_vec()),
            };
            let end = chunk.is_none();
            if queue.send((Instant::now() + delay, chunk)).is_err() || end {
                return;
            }
        }
    };
    let writing = async move {
        while let Some((due, chunk)) = queued.recv().await {
            wait_until(due).await;
            control.passable(born).await;
            let Some(chunk) = chunk else { break };
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}
