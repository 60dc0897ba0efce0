//! The public front: the client and its builder, lock requests and
//! guards, the task scope that makes re-entry safe, the default client the
//! attribute uses, the operator commands, and the macro's support.
//!
//! A client makes requests and a request makes guards; requests and
//! guards keep the client's shared state (`inner`), not the client.

pub(crate) mod admin;
pub(crate) mod builder;
pub(crate) mod client;
pub(crate) mod guard;
pub(crate) mod inner;
pub(crate) mod install;
pub(crate) mod leader;
pub(crate) mod lifecycle;
pub mod private;
pub(crate) mod request;
pub(crate) mod scope;
