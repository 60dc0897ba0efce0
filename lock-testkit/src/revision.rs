//! Which code a measurement ran: the reports of lock-bench and lock-chaos
//! name the commit they measured, and say when the tree had changes beyond
//! it, so that a published figure never describes code that is gone.

use std::path::Path;
use std::process::Command;

/// The commit checked out in a git working tree, and whether some of its
/// paths had uncommitted changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// `HEAD`'s abbreviated commit id.
    pub commit: String,
    /// Whether the paths asked about differ from that commit (changed,
    /// added or untracked); `None` when git could not tell.
    pub changed: Option<bool>,
}

/// The revision of the working tree at `root`, with whether any of `paths`
/// (relative to `root`) differ from it; `None` when `root` is not in a git
/// checkout (or git is missing).
///
/// ```
/// let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// if let Some(revision) = lock_testkit::revision(root.as_ref(), &["lock-testkit"]) {
///     assert!(!revision.commit.is_empty());
/// }
/// ```
pub fn revision(root: &Path, paths: &[&str]) -> Option<Revision> {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let status = [&["status", "--porcelain", "--"][..], paths].concat();
    let changed = git(&status).map(|changes| !changes.is_empty());
    Some(Revision { commit, changed })
}
