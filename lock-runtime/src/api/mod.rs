//! The public front: the client and its builder, lock requests and
//! guards, the task scope that makes re-entry safe, the default client the
//! attribute uses, the operator commands, and the macro's support.
//!
//! `client`, `request` and `guard` refer to each other: a client makes
//! requests, a request makes guards, and a guard keeps its client.

pub(crate) mod admin;
pub(crate) mod builder;
pub(crate) mod client;
pub(crate) mod guard;
pub(crate) mod install;
pub(crate) mod leader;
pub(crate) mod lifecycle;
pub mod private;
pub(crate) mod request;
pub(crate) mod scope;
