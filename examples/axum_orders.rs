//! An axum service that settles orders: however many instances of the
//! service run, and however often a client retries, an order is settled
//! once, by one request at a time.
//!
//! The handlers carry `#[distributed_lock]` themselves: the lock is named
//! after the order id from the path, and taken through the `LockClient` in
//! the application state (`client = state.locks`).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example axum_orders
//! ```
//!
//! What a service needs around its locks is here too: the payment call runs
//! in a task of its own, handed the lock's cancellation token so that it
//! stops if the lock is lost; `GET /ready` answers from the lock client's
//! health; and on shutdown (SIGTERM in a real service) the server drains,
//! then the lock client gives back whatever it still holds.
//!
//! Without `REDIS_URL`, the example starts a private `redis-server`. It
//! serves on a free port, sends itself a burst of concurrent requests,
//! prints the answers, checks that each order was charged once, that a
//! refund is refused while the order is locked and that the service is
//! ready, then shuts down and exits.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lock_runtime::{CancellationToken, LockClient, LockError, distributed_lock};
use serde::Serialize;

#[derive(Clone)]
struct AppState {
    locks: LockClient,
    /// Stands in for the database and the payment provider.
    ledger: Arc<Mutex<Ledger>>,
}

#[derive(Default)]
struct Ledger {
    receipts: HashMap<u64, Receipt>,
    charges: HashMap<u64, u32>,
}

#[derive(Clone, Serialize)]
struct Receipt {
    order_id: u64,
    /// The lock's fencing token when the order was settled: storage that
    /// sees a write with a smaller token than it has seen knows the writer
    /// lost its lock in between.
    fence: u64,
}

#[derive(Serialize)]
struct Settlement {
    receipt: Receipt,
    /// True when an earlier request had settled the order already.
    already_settled: bool,
}

/// What the handlers return on failure; `From<LockError>` is what the
/// attribute needs.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    NotSettled(u64),
    /// The payment call was stopped: the order's lock was lost.
    Interrupted(u64),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            // Someone else held the order's lock for the whole wait.
            AppError::Lock(err) if err.is_timeout() => {
                (StatusCode::CONFLICT, format!("busy, try again: {err}\n")).into_response()
            }
            // The lock was lost while working: the work was stopped.
            AppError::Lock(err) if err.is_lost() => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("interrupted: {err}\n"),
            )
                .into_response(),
            AppError::Lock(err) => {
                (StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n")).into_response()
            }
            AppError::NotSettled(id) => (
                StatusCode::NOT_FOUND,
                format!("order {id} is not settled\n"),
            )
                .into_response(),
            AppError::Interrupted(id) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("order {id}: payment stopped, the lock was lost; try again\n"),
            )
                .into_response(),
        }
    }
}

/// `POST /orders/{order_id}/settle`: waits up to 5 s for the order's lock,
/// then settles the order unless an earlier request did.
#[distributed_lock(key = "order:<order_id>", lease = "10s", wait = "5s", client = state.locks)]
async fn settle(
    State(state): State<AppState>,
    Path(order_id): Path<u64>,
) -> Result<Json<Settlement>, AppError> {
    // Only one request per order gets here at a time, on any instance.
    let settled = state
        .ledger
        .lock()
        .unwrap()
        .receipts
        .get(&order_id)
        .cloned();
    if let Some(receipt) = settled {
        return Ok(Json(Settlement {
            receipt,
            already_settled: true,
        }));
    }
    let fence = lock_runtime::current().map_or(0, |held| held.fence);
    // The payment call in a task of its own, which would outlive this
    // body: the lock's token stops it if the lock is lost meanwhile.
    let stop = lock_runtime::current_cancellation_token().expect("inside the order's lock");
    let payment = tokio::spawn(charge(state.clone(), order_id, stop));
    if !payment.await.unwrap_or(false) {
        return Err(AppError::Interrupted(order_id));
    }
    let receipt = Receipt { order_id, fence };
    state
        .ledger
        .lock()
        .unwrap()
        .receipts
        .insert(order_id, receipt.clone());
    Ok(Json(Settlement {
        receipt,
        already_settled: false,
    }))
}

/// `POST /orders/{order_id}/refund`: does not wait; while the order is being
/// settled, it answers 409 Conflict.
#[distributed_lock(key = "order:<order_id>", wait = "0s", client = state.locks)]
async fn refund(
    State(state): State<AppState>,
    Path(order_id): Path<u64>,
) -> Result<String, AppError> {
    let mut ledger = state.ledger.lock().unwrap();
    ledger
        .receipts
        .remove(&order_id)
        .ok_or(AppError::NotSettled(order_id))?;
    Ok(format!("refunded order {order_id}\n"))
}

/// A slow call to the payment provider, abandoned (false) if `stop` is
/// cancelled first.
async fn charge(state: AppState, order_id: u64, stop: CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(Duration::from_millis(300)) => {
            *state
                .ledger
                .lock()
                .unwrap()
                .charges
                .entry(order_id)
                .or_default() += 1;
            true
        }
    }
}

/// `GET /ready`: 200 while the lock client can take and hold locks, 503
/// with what is wrong otherwise (for a load balancer's readiness probe).
async fn ready(State(state): State<AppState>) -> Response {
    let health = state.locks.health().await;
    if health.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{health:?}\n")).into_response()
    }
}

fn app(state: AppState) -> Router {
    Router::new()
        .route("/orders/{order_id}/settle", post(settle))
        .route("/orders/{order_id}/refund", post(refund))
        .route("/ready", get(ready))
        .with_state(state)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();

    // REDIS_URL, or a private server for the demo (stopped when dropped).
    let (url, _private_server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = lock_testkit::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    let state = AppState {
        locks: LockClient::connect(&url).await?,
        ledger: Arc::default(),
    };

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("serving on http://{addr}, locks in {url}");
    // Stands in for SIGTERM (`tokio::signal::unix::signal` in a service).
    let (terminate, terminated) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, app(state.clone()))
            .with_graceful_shutdown(async {
                terminated.await.ok();
            })
            .into_future(),
    );

    // Order ids unique to this run, so that reruns against one Redis start fresh.
    let base = std::process::id() as u64 * 1000;
    let (busy, other) = (base + 42, base + 7);

    // A burst: four settles of one order and one of another, at once.
    let mut requests = Vec::new();
    for order in [busy, busy, other, busy, busy] {
        let path = format!("/orders/{order}/settle");
        requests.push(tokio::task::spawn_blocking(move || {
            send(addr, "POST", &path)
        }));
    }
    for request in requests {
        let (path, status, body) = request.await??;
        println!("POST {path} -> {status}: {body}");
    }
    let charges = |order| {
        state
            .ledger
            .lock()
            .unwrap()
            .charges
            .get(&order)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "charges: order {busy}: {}, order {other}: {}",
        charges(busy),
        charges(other)
    );
    let charged_once = charges(busy) == 1 && charges(other) == 1;

    // A refund while the order is locked elsewhere (here by hand, through
    // the runtime API, as another instance would hold it): 409 at once.
    let elsewhere = state.locks.lock(format!("order:{busy}")).acquire().await?;
    let refund = format!("/orders/{busy}/refund");
    let (path, status, body) = blocking(move || send(addr, "POST", &refund)).await?;
    println!(
        "POST {path} (order locked elsewhere) -> {status}: {}",
        body.trim_end()
    );
    let conflict = status == 409;
    elsewhere.release().await?;
    let refund = format!("/orders/{busy}/refund");
    let (path, status, body) = blocking(move || send(addr, "POST", &refund)).await?;
    println!("POST {path} -> {status}: {}", body.trim_end());
    let refunded = status == 200;

    let (path, status, body) = blocking(move || send(addr, "GET", "/ready")).await?;
    println!("GET {path} -> {status}: {}", body.trim_end());
    let was_ready = status == 200;

    // Shutting down: the server stops taking requests and finishes those
    // under way; then the lock client gives back what it still holds and
    // stops its watchdog and subscriber.
    terminate.send(()).ok();
    server.await??;
    state.locks.shutdown().await?;
    let health = state.locks.health().await;
    println!(
        "after shutdown: ready {}, locks held {}",
        health.is_ready(),
        health.held
    );

    if !charged_once {
        return Err("an order was charged more than once".into());
    }
    if !conflict || !refunded {
        return Err("the refund was not refused while the order was locked, then accepted".into());
    }
    if !was_ready || health.is_ready() || !health.shut_down {
        return Err("ready while serving and not after shutdown: not what health said".into());
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, Box<dyn std::error::Error>> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// A minimal HTTP/1.1 client: one request, the status and the body.
fn send(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(String, u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((path.to_owned(), status, body.to_owned()))
}
