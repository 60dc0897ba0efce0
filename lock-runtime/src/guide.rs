#![doc = crate::guide::guide_links!()]
//! The guide: how to use the locks well, one chapter per module.
//!
//! The chapters are the Markdown files in `lock-runtime/guide/` (inside the
//! package, so that the published crate and docs.rs have them), included
//! here so that rustdoc renders them and compiles every Rust block in them
//! as a doctest. Links between chapters are written as reference links
//! whose targets are the `.md` files (which GitHub follows); the
//! definitions below come first, so rustdoc follows them to the modules
//! instead.
#![doc = include_str!("../guide/README.md")]

/// The link targets rustdoc uses for the chapters; a Markdown file's own
/// definitions of the same labels (pointing at the `.md` files) come later
/// and are ignored by rustdoc, which takes the first definition of a label.
macro_rules! guide_links {
    () => {
        "\n\
         [guide]: crate::guide\n\
         [readme]: crate\n\
         [lease-and-wait]: crate::guide::lease_and_wait\n\
         [loss]: crate::guide::loss\n\
         [fencing]: crate::guide::fencing\n\
         [reentry]: crate::guide::reentry\n\
         [kinds]: crate::guide::kinds\n\
         [deployments]: crate::guide::deployments\n\
         [operating]: crate::guide::operating\n\
         [comparison]: crate::guide::comparison\n\
         [`LockClient::id`]: crate::LockClient::id\n\
         [`LockGuard::span`]: crate::LockGuard::span\n\
         [`metric_names`]: crate::metric_names\n\
         [`describe_metrics`]: crate::describe_metrics\n\
         [`LockClientBuilder::name`]: crate::LockClientBuilder::name\n\n"
    };
}
pub(crate) use guide_links;

#[doc = guide_links!()]
#[doc = include_str!("../guide/lease-and-wait.md")]
pub mod lease_and_wait {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/loss.md")]
pub mod loss {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/fencing.md")]
pub mod fencing {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/reentry.md")]
pub mod reentry {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/kinds.md")]
pub mod kinds {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/deployments.md")]
pub mod deployments {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/operating.md")]
pub mod operating {}

#[doc = guide_links!()]
#[doc = include_str!("../guide/comparison.md")]
pub mod comparison {}
