//! Plain types every layer shares: errors, lock names and their keys,
//! owner ids, the kinds of lock, client settings as data, and telemetry
//! (which takes labels and numbers). Nothing here does I/O or imports from
//! the layers above.

pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod keys;
pub(crate) mod kind;
pub(crate) mod owner;
pub(crate) mod telemetry;
