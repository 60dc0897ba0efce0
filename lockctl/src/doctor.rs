//! `lockctl doctor`: whether each server suits lock-runtime's locks, and
//! what to change where it does not.
//!
//! It talks to each server with plain commands (not through a lock client,
//! which refuses some of what it checks at connect), and reads what the
//! client needs: the version, `INFO` (the client reads it at connect and in
//! its scripts), the eviction policy, scripting (and whether it may run
//! its scripts as functions), publishing, persistence and the replication
//! role. See the guide's deployments chapter for why
//! each matters.

use lock_runtime::redis::{self, aio::MultiplexedConnection};
use serde_json::{Value, json};

use crate::render::Paint;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// As the locks need it.
    Ok,
    /// Works, with a cost or a risk worth knowing.
    Warn,
    /// Must change: the client refuses it, or a lock may be lost.
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One check of one server.
#[derive(Debug)]
pub(crate) struct Finding {
    /// The server, as its URL reads without a password.
    pub(crate) server: String,
    pub(crate) check: &'static str,
    pub(crate) status: Status,
    /// What was found.
    pub(crate) detail: String,
    /// What to change, for a warning or a failure.
    pub(crate) fix: Option<String>,
}

/// What the deployment needs of each server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Needs {
    /// A Cluster node: sharded pub/sub, so Redis 7.0 or later.
    pub(crate) cluster: bool,
}

/// Examines the server at `url` (shown as `shown`); an error when it cannot
/// be reached at all.
pub(crate) async fn examine(
    url: &str,
    shown: &str,
    tls_roots: Option<&[u8]>,
    needs: Needs,
) -> Result<Vec<Finding>, String> {
    let client = match tls_roots {
        Some(pem) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ),
        None => redis::Client::open(url),
    }
    .map_err(|err| format!("{shown}: {err}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(3)))
        .set_response_timeout(Some(std::time::Duration::from_secs(3)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|err| format!("{shown}: cannot connect: {err}"))?;
    let mut found = Vec::new();
    let mut finding = |check: &'static str, status: Status, detail: String, fix: Option<&str>| {
        found.push(Finding {
            server: shown.to_owned(),
            check,
            status,
            detail,
            fix: fix.map(str::to_owned),
        })
    };

    let Some(server) = info(&mut conn, "server", &mut finding).await else {
        return Ok(found);
    };
    version(&server, needs, &mut finding);
    if let Some(memory) = info(&mut conn, "memory", &mut finding).await {
        eviction(&memory, &mut finding);
    }
    if let Some(replication) = info(&mut conn, "replication", &mut finding).await {
        role(&replication, needs, &mut finding);
    }
    scripting(&mut conn, &mut finding).await;
    functions(&mut conn, &server, &mut finding).await;
    publishing(&mut conn, needs, &mut finding).await;
    if let Some(persistence) = info(&mut conn, "persistence", &mut finding).await {
        let save: Option<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("save")
            .query_async(&mut conn)
            .await
            .ok();
        durability(
            &persistence,
            save.as_ref().and_then(|s| s.get(1)),
            &mut finding,
        );
    }
    Ok(found)
}

type Record<'a> = dyn FnMut(&'static str, Status, String, Option<&str>) + 'a;

/// `INFO section`, or a finding that the client may not read it.
async fn info(
    conn: &mut MultiplexedConnection,
    section: &str,
    finding: &mut Record<'_>,
) -> Option<String> {
    match redis::cmd("INFO")
        .arg(section)
        .query_async::<String>(conn)
        .await
    {
        Ok(text) => Some(text),
        Err(err) => {
            finding(
                "info",
                Status::Fail,
                format!("`INFO {section}` refused: {err}"),
                Some(
                    "let the client's user run INFO (`+info`): the client reads the server's \
                     version, memory policy and run id at connect, and its uptime in its scripts",
                ),
            );
            None
        }
    }
}

/// `field` of an `INFO` reply.
fn field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// `major.minor` of a version string.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn version(server: &str, needs: Needs, finding: &mut Record<'_>) {
    // Valkey reports the Redis version it is compatible with besides its own.
    let redis_version = field(server, "redis_version").unwrap_or("unknown");
    let name = match field(server, "valkey_version") {
        Some(valkey) => format!("Valkey {valkey} (Redis {redis_version})"),
        None => format!("Redis {redis_version}"),
    };
    let needed = if needs.cluster { (7, 0) } else { (6, 2) };
    match major_minor(redis_version) {
        Some(v) if v >= needed => finding("version", Status::Ok, name, None),
        // A server that does not say (a proxy, a compatible store): the
        // client does not check either.
        None => finding(
            "version",
            Status::Warn,
            format!("{name}: no version the client can read"),
            Some("make sure it is Redis 6.2 or later (7.0 on a Cluster), or Valkey"),
        ),
        Some(_) => finding(
            "version",
            Status::Fail,
            format!("{name}: older than {}.{}", needed.0, needed.1),
            Some(if needs.cluster {
                "upgrade to Redis 7.0 or later (or Valkey): a Cluster needs sharded pub/sub"
            } else {
                "upgrade to Redis 6.2 or later (or Valkey)"
            }),
        ),
    }
}

fn eviction(memory: &str, finding: &mut Record<'_>) {
    let limit: u64 = field(memory, "maxmemory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let Some(policy) = field(memory, "maxmemory_policy") else {
        finding(
            "eviction",
            Status::Warn,
            "INFO memory does not say the eviction policy".to_owned(),
            Some("make sure maxmemory-policy is noeviction, or that there is no memory limit"),
        );
        return;
    };
    if limit == 0 || policy == "noeviction" {
        let detail = if limit == 0 {
            format!("no memory limit (maxmemory-policy {policy})")
        } else {
            format!("maxmemory {limit} bytes, maxmemory-policy noeviction")
        };
        finding("eviction", Status::Ok, detail, None);
    } else {
        finding(
            "eviction",
            Status::Fail,
            format!(
                "maxmemory-policy {policy} under maxmemory {limit} bytes: Redis may drop a held \
                 lock, and the client refuses to connect"
            ),
            Some(
                "set maxmemory-policy noeviction (`CONFIG SET maxmemory-policy noeviction` and \
                 redis.conf, or a managed service's parameter group: see the deployments \
                 chapter's \"Memory limits\")",
            ),
        );
    }
}

fn role(replication: &str, needs: Needs, finding: &mut Record<'_>) {
    let role = field(replication, "role").unwrap_or("unknown");
    let replicas: u32 = field(replication, "connected_slaves")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if role == "slave" && needs.cluster {
        finding(
            "role",
            Status::Ok,
            "a Cluster replica: the client sends lock calls to the masters".to_owned(),
            None,
        );
    } else if role == "slave" {
        finding(
            "role",
            Status::Fail,
            "a replica: it refuses the scripts' writes".to_owned(),
            Some("point the client at the master (or at Sentinel, which finds it)"),
        );
    } else if replicas == 0 {
        finding("role", Status::Ok, "master, no replicas".to_owned(), None);
    } else {
        finding(
            "role",
            Status::Ok,
            format!(
                "master with {replicas} replica(s): `min_replicas` up to {replicas} confirms \
                 each lock on them"
            ),
            None,
        );
    }
}

async fn scripting(conn: &mut MultiplexedConnection, finding: &mut Record<'_>) {
    // What the lock scripts call besides the lock's own keys: the clock,
    // and the server's uptime for the restart check.
    let probe = redis::Script::new(
        "redis.call('TIME'); redis.pcall('LASTSAVE'); redis.call('INFO', 'server'); return 1",
    );
    match probe.prepare_invoke().invoke_async::<i64>(conn).await {
        Ok(_) => finding(
            "scripting",
            Status::Ok,
            "Lua scripts run, with TIME and INFO".to_owned(),
            None,
        ),
        Err(err) => finding(
            "scripting",
            Status::Fail,
            format!("a script like the lock scripts failed: {err}"),
            Some(
                "allow EVALSHA, EVAL and SCRIPT LOAD, and TIME and INFO inside scripts, for the \
                 client's user (`+@scripting +time +info`; the guide's requirements section \
                 has a whole ACL line)",
            ),
        ),
    }
}

/// Whether the client can run its scripts as functions of its library
/// (FCALL, Redis 7.0 and later), which costs Redis less per call than
/// EVALSHA; the client falls back to EVALSHA where the server refuses them.
async fn functions(conn: &mut MultiplexedConnection, server: &str, finding: &mut Record<'_>) {
    let version = field(server, "redis_version").and_then(major_minor);
    if version.is_some_and(|v| v < (7, 0)) {
        finding(
            "functions",
            Status::Ok,
            "none before Redis 7.0: the client runs its scripts by EVALSHA".to_owned(),
            None,
        );
        return;
    }
    // A function no library has: a server that lets the user call
    // functions answers that it has no such function.
    let probe = redis::cmd("FCALL")
        .arg("lockctl_doctor_probe")
        .arg(0)
        .query_async::<redis::Value>(conn)
        .await;
    match probe {
        Err(err)
            if !err
                .detail()
                .is_some_and(|d| d.starts_with("Function not found")) =>
        {
            finding(
                "functions",
                Status::Warn,
                format!(
                    "FCALL refused ({err}): the client runs its scripts by EVALSHA, which costs \
                 Redis more per lock"
                ),
                Some(
                    "allow `+fcall +function|load` for the client's user (the guide's ACL line has \
                 them)",
                ),
            )
        }
        _ => finding(
            "functions",
            Status::Ok,
            "FCALL allowed: the client runs its scripts as functions of its library, which \
             it loads with FUNCTION LOAD at first use"
                .to_owned(),
            None,
        ),
    }
}

async fn publishing(conn: &mut MultiplexedConnection, needs: Needs, finding: &mut Record<'_>) {
    let command = if needs.cluster { "SPUBLISH" } else { "PUBLISH" };
    // A channel nobody listens to: nothing is woken.
    let sent = redis::cmd(command)
        .arg("lockctl-doctor:{probe}")
        .arg("")
        .query_async::<i64>(conn)
        .await;
    match sent {
        // A Cluster node that does not own the probe's slot redirects it
        // (MOVED, ASK): Redis checks the ACL before that, so publishing is
        // allowed, as when it is answered.
        Err(err) if !matches!(err.code(), Some("MOVED" | "ASK")) => finding(
            "pubsub",
            Status::Warn,
            format!("{command} refused: {err}"),
            Some(
                "let the client's user publish and subscribe on its release channels \
                 (`+publish +subscribe`, or the sharded ones on a Cluster, with a channel \
                 pattern for the lock prefix); without them waiters poll",
            ),
        ),
        Ok(_) | Err(_) => finding(
            "pubsub",
            Status::Ok,
            format!("{command} allowed (releases wake waiters)"),
            None,
        ),
    }
}

fn durability(persistence: &str, save: Option<&String>, finding: &mut Record<'_>) {
    let aof = field(persistence, "aof_enabled") == Some("1");
    let snapshots = save.map(|save| !save.trim().is_empty());
    match (aof, snapshots) {
        (true, _) => finding(
            "persistence",
            Status::Ok,
            "append-only file on: locks survive a restart".to_owned(),
            None,
        ),
        (false, Some(true)) => finding(
            "persistence",
            Status::Ok,
            format!(
                "snapshots (save {}): a restart may lose the locks taken since the last one; \
                 clients keep locks closed for their restart quarantine after it",
                save.map_or("", String::as_str)
            ),
            None,
        ),
        (false, Some(false)) => finding(
            "persistence",
            Status::Warn,
            "no persistence: a restart forgets every lock; clients keep locks closed for their \
             restart quarantine after it"
                .to_owned(),
            Some("`appendonly yes` keeps locks across restarts, so no quarantine is needed"),
        ),
        (false, None) => finding(
            "persistence",
            Status::Ok,
            "append-only file off; the save policy could not be read (CONFIG GET refused)"
                .to_owned(),
            None,
        ),
    }
}

/// The findings as text: one line each, the fix on the next.
pub(crate) fn text(found: &[Finding], paint: Paint) -> String {
    let mut out = String::new();
    for f in found {
        let status = match f.status {
            Status::Ok => paint.owner(f.status.label()),
            Status::Warn | Status::Fail => paint.warn(f.status.label()),
        };
        out += &format!(
            "{status:<4}  {}  {:<11}  {}\n",
            paint.dim(&f.server),
            f.check,
            f.detail
        );
        if let Some(fix) = &f.fix {
            out += &format!("      → {fix}\n");
        }
    }
    out
}

/// The findings as a JSON array.
pub(crate) fn json(found: &[Finding]) -> Value {
    Value::Array(
        found
            .iter()
            .map(|f| {
                json!({
                    "server": f.server,
                    "check": f.check,
                    "status": f.status.label().to_ascii_lowercase(),
                    "detail": f.detail,
                    "fix": f.fix,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_fields_are_read() {
        assert_eq!(major_minor("7.0.15"), Some((7, 0)));
        assert_eq!(major_minor("6.2.14"), Some((6, 2)));
        assert_eq!(major_minor("x"), None);
        let info = "# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.0\r\n";
        assert_eq!(field(info, "redis_version"), Some("7.2.4"));
        assert_eq!(field(info, "valkey_version"), Some("9.1.0"));
        assert_eq!(field(info, "redis"), None);
    }
}
