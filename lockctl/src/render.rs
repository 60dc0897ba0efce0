//! How locks are printed: aligned text for people (colored on a terminal),
//! JSON for scripts.

use std::fmt::Write as _;
use std::time::Duration;

use lock_runtime::{HoldMode, Holder, LockInfo};
use owo_colors::{OwoColorize, Style};
use serde_json::{Value, json};

/// Styles text only when colors are on (stdout is a terminal and
/// `NO_COLOR` is not set), so piped output stays plain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paint {
    pub(crate) on: bool,
}

impl Paint {
    fn with(self, text: &str, style: Style) -> String {
        if self.on {
            text.style(style).to_string()
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn header(self, text: &str) -> String {
        self.with(text, Style::new().bold())
    }

    pub(crate) fn name(self, text: &str) -> String {
        self.with(text, Style::new().cyan().bold())
    }

    pub(crate) fn owner(self, text: &str) -> String {
        self.with(text, Style::new().green())
    }

    pub(crate) fn dim(self, text: &str) -> String {
        self.with(text, Style::new().dimmed())
    }

    pub(crate) fn warn(self, text: &str) -> String {
        self.with(text, Style::new().yellow().bold())
    }
}

/// A lease left, short: `850ms`, `12.3s`, `4m05s`, `1h02m`, or `-` for a
/// key without expiry.
pub(crate) fn ttl(ttl: Option<Duration>) -> String {
    let Some(ttl) = ttl else {
        return "-".to_owned();
    };
    let ms = ttl.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// The waiters in one cell: clients subscribed, and fair waiters in line.
fn waiters(info: &LockInfo) -> String {
    let waiters = &info.waiters;
    if waiters.queued.is_empty() {
        waiters.subscribers.to_string()
    } else {
        format!("{} ({} in line)", waiters.subscribers, waiters.queued.len())
    }
}

/// The kind, with a semaphore's permits taken of its number
/// (`semaphore 3/10`).
fn kind(info: &LockInfo) -> String {
    match info.limit {
        Some(limit) => format!("{} {}/{limit}", info.kind, taken(info)),
        None => info.kind.to_string(),
    }
}

/// The permits a semaphore's holders hold together.
fn taken(info: &LockInfo) -> u32 {
    info.holders.iter().map(|holder| holder.permits).sum()
}

/// The `list` table: one row per holder (a lock with only waiters in line
/// gets one row without an owner).
pub(crate) fn table(locks: &[LockInfo], paint: Paint) -> String {
    const HEADERS: [&str; 7] = ["KEY", "KIND", "OWNER", "COUNT", "TTL", "FENCE", "WAITERS"];
    let mut rows: Vec<[String; 7]> = Vec::new();
    for info in locks {
        let blank = |cells: [String; 4]| {
            let [owner, count, ttl, fence] = cells;
            [
                info.name.clone(),
                kind(info),
                owner,
                count,
                ttl,
                fence,
                waiters(info),
            ]
        };
        if info.holders.is_empty() {
            rows.push(blank(["-".into(), "-".into(), "-".into(), "-".into()]));
        }
        for holder in &info.holders {
            rows.push(blank([
                holder.label(),
                holder.count.to_string(),
                ttl(holder.ttl),
                holder.fence.to_string(),
            ]));
        }
    }
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    // Padding is computed on the plain text: escape codes take no columns.
    let line = |out: &mut String, cells: [String; 7], styled: [String; 7]| {
        let last = cells.len() - 1;
        for (i, (cell, styled)) in cells.iter().zip(styled).enumerate() {
            out.push_str(&styled);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    };
    let headers = HEADERS.map(str::to_owned);
    line(&mut out, headers.clone(), headers.map(|h| paint.header(&h)));
    for row in rows {
        let styled = [
            paint.name(&row[0]),
            row[1].clone(),
            paint.owner(&row[2]),
            row[3].clone(),
            row[4].clone(),
            row[5].clone(),
            row[6].clone(),
        ];
        line(&mut out, row, styled);
    }
    out
}

/// One lock in full, for `inspect`.
pub(crate) fn details(info: &LockInfo, paint: Paint) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}  {}", paint.name(&info.name), info.kind);
    let _ = writeln!(out, "  key      {}", info.key);
    if let Some(limit) = info.limit {
        let _ = writeln!(out, "  permits  {} of {limit} taken", taken(info));
    }
    for holder in &info.holders {
        let _ = writeln!(out, "  holder   {}", holder_line(holder, paint));
    }
    if info.holders.is_empty() {
        let _ = writeln!(out, "  holder   {}", paint.dim("none (handing over)"));
    }
    let _ = writeln!(
        out,
        "  waiters  {} subscribed client(s), {} in line",
        info.waiters.subscribers,
        info.waiters.queued.len()
    );
    for (place, owner) in info.waiters.queued.iter().enumerate() {
        let _ = writeln!(out, "    {}. {}", place + 1, owner_text(owner, paint));
    }
    out
}

/// A holder on one line: who, how (with a semaphore holder's permits),
/// and its lease, token and count.
pub(crate) fn holder_line(holder: &Holder, paint: Paint) -> String {
    let permits = if holder.mode == HoldMode::Permit {
        format!(" x{}", holder.permits)
    } else {
        String::new()
    };
    format!(
        "{} ({}{permits}) count {} fence {} ttl {}",
        owner_text(&holder.owner, paint),
        holder.mode,
        holder.count,
        holder.fence,
        ttl(holder.ttl),
    )
}

/// `NAME@HOST:PID` highlighted, then the client and scope dimmed.
fn owner_text(owner: &str, paint: Paint) -> String {
    match owner.rsplit_once('/') {
        Some((label, id)) if owner.parse::<lock_runtime::OwnerId>().is_ok() => {
            format!("{}{}", paint.owner(label), paint.dim(&format!("/{id}")))
        }
        _ => owner.to_owned(),
    }
}

/// A lock as JSON.
pub(crate) fn json(info: &LockInfo) -> Value {
    json!({
        "name": info.name,
        "key": info.key,
        "kind": info.kind.as_str(),
        "limit": info.limit,
        "holders": info.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "waiters": {
            "subscribers": info.waiters.subscribers,
            "queued": info.waiters.queued,
        },
    })
}

fn holder_json(holder: &Holder) -> Value {
    let id = holder.owner_id.as_ref();
    json!({
        "owner": holder.owner,
        "name": id.map(|id| id.name.clone()),
        "host": id.map(|id| id.host.clone()),
        "pid": id.map(|id| id.pid),
        "client": id.map(|id| id.client.to_string()),
        "scope": id.map(|id| id.scope),
        "mode": holder.mode.as_str(),
        "permits": holder.permits,
        "count": holder.count,
        "fence": holder.fence,
        "ttl_ms": holder.ttl.map(|ttl| ttl.as_millis() as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_print_short() {
        let ms = Duration::from_millis;
        assert_eq!(ttl(None), "-");
        assert_eq!(ttl(Some(ms(850))), "850ms");
        assert_eq!(ttl(Some(ms(12_345))), "12.3s");
        assert_eq!(ttl(Some(ms(245_000))), "4m05s");
        assert_eq!(ttl(Some(ms(3_720_000))), "1h02m");
    }
}
