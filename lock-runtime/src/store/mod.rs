//! Where locks are kept: connections to Redis (one server, a Sentinel-
//! followed master, a Cluster), the Lua scripts and typed calls to them,
//! and the in-memory server that runs the same scripts (feature `memory`).

pub(crate) mod answers;
pub(crate) mod coalesce;
pub(crate) mod connection;
pub(crate) mod deployment;
#[cfg(feature = "memory")]
pub(crate) mod memory;
pub(crate) mod node;
pub(crate) mod replicas;
pub(crate) mod scripts;
