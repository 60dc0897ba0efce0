//! Plain types every layer shares: errors, lock names and their keys,
//! owner ids, the kinds of lock, client settings as data, connection URLs
//! with their passwords hidden for messages, telemetry (which takes labels
//! and numbers), and a future that finishes in a task of its own when its
//! caller drops it. Nothing here does I/O or imports from the layers above.

pub(crate) mod config;
pub(crate) mod detached;
pub(crate) mod error;
pub(crate) mod keys;
pub(crate) mod kind;
pub(crate) mod owner;
pub(crate) mod redact;
pub(crate) mod telemetry;
