//! The fenced resource: a tiny store on loopback that remembers the highest
//! fencing token written per key, rejects writes with an older one, and
//! records every write it receives.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::checker::{Holder, Write};
use crate::clock;
use crate::record::{Role, WriteRequest};

#[derive(Debug, Default)]
struct State {
    highest: HashMap<u32, u64>,
    log: Vec<Write>,
}

/// The running resource service.
#[derive(Debug, Clone)]
pub struct Resource {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Resource {
    /// Listens on a free loopback port and serves until the runtime stops.
    pub async fn start() -> std::io::Result<Resource> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let resource = Resource {
            addr: listener.local_addr()?,
            state: Arc::default(),
        };
        let state = resource.state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, state.clone()));
            }
        });
        Ok(resource)
    }

    /// Where writers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every write so far, in the order received.
    pub fn log(&self) -> Vec<Write> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log
            .clone()
    }
}

/// Applies one write: accepted when its token is not below the highest seen
/// for the key. Writes of holders that share their lock (readers, permit
/// holders) are not fenced: always accepted, without moving the highest
/// token. Returns the answer line.
fn apply(state: &Mutex<State>, request: &WriteRequest) -> String {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    let at = clock::now_us();
    let (accepted, answer) = if request.role == Role::Exclusive {
        let highest = state.highest.entry(request.key).or_insert(0);
        if request.token >= *highest {
            *highest = request.token;
            (true, "OK\n".to_owned())
        } else {
            (false, format!("NO {highest}\n"))
        }
    } else {
        (true, "OK\n".to_owned())
    };
    state.log.push(Write {
        at,
        holder: Holder {
            worker: request.worker,
            task: request.task,
            seq: request.seq,
        },
        key: request.key,
        role: request.role,
        token: request.token,
        begin: request.begin,
        accepted,
        acquired: request.acquired,
    });
    answer
}

async fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let answer = match WriteRequest::parse(&line) {
            Some(request) => apply(&state, &request),
            None => "ERR bad request\n".to_owned(),
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A writer's connection to the resource.
#[derive(Debug)]
pub struct Writer {
    addr: SocketAddr,
    conn: Option<(
        BufReader<tokio::net::tcp::OwnedReadHalf>,
        tokio::net::tcp::OwnedWriteHalf,
    )>,
}

impl Writer {
    /// A writer for the resource at `addr` (connects on first use).
    pub fn new(addr: SocketAddr) -> Writer {
        Writer { addr, conn: None }
    }

    /// Sends one write; `Ok(true)` when accepted.
    pub async fn write(&mut self, request: &WriteRequest) -> std::io::Result<bool> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            let (read, write) = stream.into_split();
            self.conn = Some((BufReader::new(read), write));
        }
        let result = async {
            let (read, write) = self.conn.as_mut().expect("connected above");
            write.write_all(format!("{request}\n").as_bytes()).await?;
            let mut answer = String::new();
            if read.read_line(&mut answer).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            Ok(answer.starts_with("OK"))
        }
        .await;
        if result.is_err() {
            self.conn = None;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(task: u32, token: u64) -> WriteRequest {
        WriteRequest {
            worker: 1,
            task,
            seq: 1,
            key: 0,
            role: Role::Exclusive,
            token,
            begin: true,
            acquired: 0,
        }
    }

    #[test]
    fn older_tokens_are_rejected_and_everything_is_logged() {
        let state = Mutex::new(State::default());
        assert_eq!(apply(&state, &request(0, 5)), "OK\n");
        assert_eq!(apply(&state, &request(1, 4)), "NO 5\n");
        assert_eq!(apply(&state, &request(0, 5)), "OK\n");
        assert_eq!(apply(&state, &request(1, 6)), "OK\n");
        let log = &state.lock().unwrap().log;
        let accepted: Vec<bool> = log.iter().map(|w| w.accepted).collect();
        assert_eq!(accepted, [true, false, true, true]);
    }
}
