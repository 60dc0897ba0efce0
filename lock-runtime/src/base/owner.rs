//! Owner ids: who holds a lock, in a form an operator can read.
//!
//! Every lock records its holder's owner id. It reads
//! `NAME@HOST:PID/CLIENT:SCOPE`: the client's name (set with
//! [`LockClientBuilder::name`](crate::LockClientBuilder::name), by default
//! the program's name), the host and process it runs in, the client's unique
//! id, and the scope (one `#[distributed_lock]` call, or one acquisition
//! outside any) within that client. The scripts only compare owner ids for
//! equality; the readable part is for `lockctl` and for people reading keys.

use std::fmt;

use uuid::Uuid;

/// A parsed owner id: which program, host, process, client and scope holds
/// a lock.
///
/// ```
/// use lock_runtime::OwnerId;
///
/// let owner: OwnerId = "billing@web-3:4242/67e55044-10b1-426f-9247-bb680e5fe0c8:7"
///     .parse()
///     .unwrap();
/// assert_eq!(owner.name, "billing");
/// assert_eq!(owner.host, "web-3");
/// assert_eq!(owner.pid, 4242);
/// assert_eq!(owner.scope, 7);
/// assert_eq!(owner.to_string().parse::<OwnerId>().unwrap(), owner);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerId {
    /// The client's name: given to the builder, or the program's name.
    pub name: String,
    /// The host the client runs on.
    pub host: String,
    /// The client's process id.
    pub pid: u32,
    /// The client's unique id ([`LockClient::id`](crate::LockClient::id)).
    pub client: Uuid,
    /// The scope within the client: one locked call or one acquisition.
    pub scope: u64,
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}:{}",
            label(&self.name, &self.host, self.pid),
            self.client,
            self.scope
        )
    }
}

/// An owner id that is not in the `NAME@HOST:PID/CLIENT:SCOPE` form, such as
/// one written by an older version or by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an owner id of the form NAME@HOST:PID/CLIENT:SCOPE: `{0}`")]
pub struct BadOwnerId(pub String);

impl std::str::FromStr for OwnerId {
    type Err = BadOwnerId;

    fn from_str(text: &str) -> Result<OwnerId, BadOwnerId> {
        let bad = || BadOwnerId(text.to_owned());
        let (label, id) = text.rsplit_once('/').ok_or_else(bad)?;
        let (client, scope) = id.split_once(':').ok_or_else(bad)?;
        let (name_host, pid) = label.rsplit_once(':').ok_or_else(bad)?;
        let (name, host) = name_host.split_once('@').ok_or_else(bad)?;
        Ok(OwnerId {
            name: name.to_owned(),
            host: host.to_owned(),
            pid: pid.parse().map_err(|_| bad())?,
            client: client.parse().map_err(|_| bad())?,
            scope: scope.parse().map_err(|_| bad())?,
        })
    }
}

/// `NAME@HOST:PID`, with characters that would make it ambiguous to parse
/// (`@`, `/`, `:`, spaces and controls) replaced by `-`.
pub(crate) fn label(name: &str, host: &str, pid: u32) -> String {
    format!("{}@{}:{pid}", clean(name), clean(host))
}

/// The label of this process under `name`, or under the program's name.
pub(crate) fn this_process(name: Option<&str>) -> String {
    let program = std::env::current_exe()
        .ok()
        .and_then(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()));
    let name = name
        .map(str::to_owned)
        .or(program)
        .unwrap_or_else(|| "lock-client".to_owned());
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    label(&name, &host, std::process::id())
}

fn clean(part: &str) -> String {
    let cleaned: String = part
        .chars()
        .map(|c| {
            if matches!(c, '@' | '/' | ':') || c.is_whitespace() || c.is_control() {
                '-'
            } else {
                c
            }
        })
        .collect();
    if cleaned.is_empty() {
        "-".to_owned()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_separators_still_parse() {
        let client = Uuid::new_v4();
        let text = format!("{}/{client}:3", label("my app/v2@eu:1", "host:x", 9));
        let owner: OwnerId = text.parse().unwrap();
        assert_eq!(owner.name, "my-app-v2-eu-1");
        assert_eq!(owner.host, "host-x");
        assert_eq!((owner.pid, owner.client, owner.scope), (9, client, 3));
        assert_eq!(owner.to_string(), text);
    }

    #[test]
    fn this_process_names_the_program_host_and_pid() {
        let label = this_process(None);
        assert!(
            label.ends_with(&format!(":{}", std::process::id())),
            "{label}"
        );
        assert!(this_process(Some("worker")).starts_with("worker@"));
    }

    #[test]
    fn other_forms_are_refused() {
        for text in [
            "",
            "abc",
            "67e55044-10b1-426f-9247-bb680e5fe0c8:1",
            "a@b:x/c:1",
        ] {
            assert!(text.parse::<OwnerId>().is_err(), "{text}");
        }
    }
}
