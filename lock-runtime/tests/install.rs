//! The default client and the task-local view of the held lock.

mod common;

use std::time::Duration;

use common::{ok, start_server_with_clients};
use lock_runtime::LockError;
use lock_testkit::unique_key;

// One test: the default client is process-wide state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_sets_the_default_client_once_and_current_names_the_held_lock() {
    assert!(matches!(
        lock_runtime::installed(),
        Err(LockError::NotInstalled)
    ));
    assert!(lock_runtime::current().is_none());

    let (server, [locks, other]) = start_server_with_clients().await;
    lock_runtime::install(locks.clone()).expect("the first install");
    let installed = lock_runtime::installed().expect("installed");
    assert_eq!(installed.id(), locks.id());

    // A second install is refused, like tracing's set_global_default, and
    // the first client stays the default.
    let again = lock_runtime::install(other.clone());
    assert!(
        matches!(&again, Err(LockError::Config(message)) if message.contains("installed already")),
        "{again:?}"
    );
    assert_eq!(
        lock_runtime::installed().expect("installed").id(),
        locks.id()
    );
    // The refused client is still a working client of its own.
    let name = unique_key("refused");
    let guard = ok(&server, other.lock(name.as_str()).acquire().await);
    ok(&server, guard.release().await);

    let outer_name = unique_key("outer");
    let inner_name = unique_key("inner");
    let outer = ok(&server, installed.lock(outer_name.as_str()).acquire().await);
    let seen = outer
        .scope(async {
            let here = lock_runtime::current().expect("inside the scope");
            assert_eq!(here.name, outer_name);
            assert_eq!(here.fence, outer.fence());
            let inner = ok(
                &server,
                installed
                    .lock(inner_name.as_str())
                    .wait(Duration::ZERO)
                    .acquire()
                    .await,
            );
            let nested = inner
                .scope(async { lock_runtime::current().expect("nested").name })
                .await
                .expect("not lost");
            assert_eq!(nested, inner_name);
            // Back in the outer scope once the inner one ends.
            assert_eq!(
                lock_runtime::current().map(|c| c.name),
                Some(outer_name.clone())
            );
            ok(&server, inner.release().await);
            here
        })
        .await
        .expect("not lost");
    assert_eq!(seen.name, outer_name);
    assert!(lock_runtime::current().is_none());
    ok(&server, outer.release().await);
}
