//! The `#[distributed_lock]` attribute. Use it through `lock-runtime`, which
//! re-exports it as [`lock_runtime::distributed_lock`](../lock_runtime/attr.distributed_lock.html).

mod attr;
mod duration;
mod expand;
mod key;
mod valid;

use proc_macro::TokenStream;
use quote::quote;

/// Runs an `async fn` while holding a Redis lock named after its arguments.
///
/// ```no_run
/// use lock_runtime::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "order:<order_id>", lease = "30s", wait = "5s")]
/// async fn settle(order_id: u64, db: &Db) -> Result<Receipt, AppError> {
///     // Runs while this task holds the lock `order:<order_id>`. The lock is
///     // renewed every lease/3 while the body runs and released after it.
///     db.settle(order_id).await
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), AppError> {
///     let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
///     lock_runtime::install(locks)?; // the client the attribute uses by default
///     settle(42, &Db).await?;
///     Ok(())
/// }
/// # struct Db;
/// # struct Receipt;
/// # impl Db { async fn settle(&self, _: u64) -> Result<Receipt, AppError> { Ok(Receipt) } }
/// # #[derive(Debug)] enum AppError { Lock(LockError) }
/// # impl From<LockError> for AppError { fn from(e: LockError) -> Self { AppError::Lock(e) } }
/// ```
///
/// Before the body runs, the function takes the lock, waiting for it if
/// another holder has it. While the body runs, the client's watchdog renews
/// the lock. When the body finishes — by its last expression, an early
/// `return`, a `?`, a panic, or because the caller dropped the future — the
/// lock is given back right away (after a panic or a dropped future, by a
/// release spawned in the background), not when its lease runs out.
///
/// # The function
///
/// The attribute goes on an `async fn`: a free function, a method taking
/// `self`, `&self`, `&mut self` or `self: Arc<Self>`, a generic function, an
/// `async fn` in a trait (with a default body) or in a trait impl, with
/// other attributes (such as `#[tracing::instrument]`) above or below it.
/// Methods of an `#[async_trait]` impl are not supported: that attribute
/// turns them into plain `fn`s before this one runs; use `async fn` in the
/// trait itself, which Rust supports natively.
///
/// It must return `Result<T, E>` where `E: From<LockError>`, because the
/// lock itself can fail: [`LockError`](../lock_runtime/enum.LockError.html)
/// is converted into `E` with `From`. Aliases are accepted too, written as
/// a path whose last name ends in `Result` (`anyhow::Result<T>`,
/// `AppResult<T>`); whether their error type converts, the compiler checks.
/// A missing `From<LockError>` is reported on the error type.
///
/// # Options
///
/// | option | value | default |
/// |---|---|---|
/// | `key` | template string; this or `keys` is required | |
/// | `keys` | list of template strings, instead of `key` | |
/// | `permits` | whole number, at least 1 | a lock: one holder at a time |
/// | `mode` | `"read"` or `"write"` | `"write"` |
/// | `fair` | `true` or `false` | `false` |
/// | `lease` | duration string | the client's default lease (30 s unless set on the builder) |
/// | `wait` | duration string; `"0s"` tries once | the client's default wait (10 s unless set on the builder) |
/// | `lock_at_most` | duration string, instead of `lease`: a lease that is never renewed | the lease is renewed while the body runs |
/// | `lock_at_least` | duration string | the lock is given back when the body ends |
/// | `max_hold` | duration string, with `lease`: renewed up to this, no further | renewed as long as the body runs |
/// | `on_busy` | `"error"` or `"skip"` | `"error"` |
/// | `min_replicas` | whole number; `0` turns the client's setting off | the client's `min_replicas` (0 unless set on the builder) |
/// | `client` | expression giving a `LockClient` | the client passed to `lock_runtime::install` |
/// | `crate` | path string | `"::lock_runtime"` |
///
/// ## `key`
///
/// The lock's name. `<name>` inserts the parameter `name`, written with
/// `Display`; `<name.field.sub>` follows fields (and tuple indices, `<pair.0>`);
/// `<self.field>` works in methods. A key may hold any number of
/// placeholders. Braces are plain text, so Redis Cluster hash tags stay
/// usable, and `<<` and `>>` write a literal `<` and `>`. The template is
/// split at compile time: at run time the key is written piece by piece.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// struct Tenant { id: u32 }
/// struct Order { tenant: Tenant, id: u64 }
///
/// // The lock "{tenant:7}:order:42" for tenant 7's order 42; every lock of
/// // a tenant lives in the same Redis Cluster hash slot.
/// #[distributed_lock(key = "{tenant:<order.tenant.id>}:order:<order.id>")]
/// async fn ship(order: &Order) -> Result<(), LockError> {
///     Ok(())
/// }
///
/// struct Ledger { account: String }
///
/// impl Ledger {
///     #[distributed_lock(key = "ledger:<self.account>:<day>")]
///     async fn close_day(&self, day: u32) -> Result<(), LockError> {
///         Ok(())
///     }
/// }
/// ```
///
/// A placeholder must name a parameter (in `State(state): State<S>`, the
/// parameter is `state`); an empty key, an empty `<>`, an unclosed `<`, a
/// stray `>` or a placeholder that names no parameter is a compile error
/// that lists the parameters.
///
/// ## `keys`
///
/// Several locks taken together, instead of one `key`: each entry is a
/// template like `key`'s, checked the same way. The body runs once all of
/// them are held; they are taken all at once or not at all, in one order
/// whatever the order of the list, so two calls naming the same locks in
/// opposite orders never deadlock. Two entries that give the same key at
/// run time (a transfer from an account to itself) are one lock. If any
/// of them is lost, the body is stopped.
/// [`lock_runtime::current_locks()`](../lock_runtime/fn.current_locks.html)
/// names them all, with their fencing tokens, sorted by key.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// #[distributed_lock(keys = ["account:<from>", "account:<to>"])]
/// async fn transfer(from: u64, to: u64, cents: u64) -> Result<(), LockError> {
///     let held = lock_runtime::current_locks();
///     assert!(held.iter().any(|lock| lock.name == format!("account:{to}")));
///     Ok(())
/// }
/// ```
///
/// ## `permits`
///
/// Makes the lock a semaphore: up to `permits` holders run the body at
/// once, across every client. Each permit is leased and renewed like a
/// lock, so the permit of a holder that crashed comes back after its
/// lease. Everyone using a semaphore must give it the same number of
/// permits. A semaphore has one name, so it takes `key`, not `keys`.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// // At most three exports per region at a time, however many instances run.
/// #[distributed_lock(key = "exports:<region>", permits = 3)]
/// async fn export(region: &str) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `mode`
///
/// Makes the lock a read-write lock: `mode = "read"` shares it with other
/// readers, `mode = "write"` holds it alone. The write side is the plain
/// lock, so `mode = "write"` is the default, written out, and a function
/// with only `key` on the same name excludes readers too. A writer waiting
/// for readers holds back new readers, so a stream of readers cannot
/// starve it; a task holding the write lock may call a reader of the same
/// name, which then does not wait.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// #[distributed_lock(key = "catalog:<shop>", mode = "read")]
/// async fn price(shop: u32, sku: &str) -> Result<u64, LockError> {
///     Ok(100)
/// }
///
/// #[distributed_lock(key = "catalog:<shop>", mode = "write")]
/// async fn reprice(shop: u32) -> Result<(), LockError> {
///     let _old = price(shop, "sku-1").await?; // the writer may read
///     Ok(())
/// }
/// ```
///
/// ## `fair`
///
/// `fair = true` makes waiters take the lock in the order they arrived,
/// across every client, instead of whichever retries first. A release
/// wakes only the next waiter in line; a waiter that gives up (its `wait`
/// is over, or its future is dropped) leaves the line at once, and one
/// that dies leaves it within a few seconds. Use one kind of lock per
/// name: a plain lock's waiters on the same name share the line, and take
/// the lock out of its order. `fair = false` is the default.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// #[distributed_lock(key = "printer:<id>", fair = true, wait = "1m")]
/// async fn print(id: u32, page: &str) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `lease`
///
/// How long the lock outlives a holder that stops renewing it (a crashed
/// process, a partition). While the body runs, the lock is renewed every
/// third of its lease. Written with the units `ms`, `s`, `m` and `h`, alone
/// or combined from largest to smallest: `"500ms"`, `"30s"`, `"1m30s"`,
/// `"2h"`. Checked at compile time: zero, an unknown unit, a value that
/// overflows, or a lease shorter than 100 ms (too short to renew safely) is
/// an error.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// #[distributed_lock(key = "report:<day>", lease = "1m30s")]
/// async fn nightly_report(day: u32) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `wait`
///
/// How long to wait while someone else holds the lock, in the same syntax;
/// `"0s"` tries exactly once. Waiting is not polling: the waiter sleeps
/// until the holder's release is published, its lease runs out, or the wait
/// is over.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// // Skip the run if another instance is already doing it.
/// #[distributed_lock(key = "job:reindex", wait = "0s")]
/// async fn reindex() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `lock_at_most`
///
/// The lock's lease, as a hard upper bound: the lock is not renewed while
/// the body runs, so it is held for `lock_at_most` at most, whatever
/// happens to the holder. When it runs out before the body ends, the body
/// is stopped at its next `.await` and the function returns
/// `Err(LockError::Lost { .. }.into())` (see [below](#when-the-lock-is-lost)).
/// For scheduled jobs that must not hold their lock longer than a bound
/// (ShedLock's `lockAtMostFor`): give it a value well above the job's
/// normal run time. Written like `lease`, and checked the same way (zero,
/// an unknown unit, an overflow, or less than 100 ms is an error); it sets
/// the lease, so it cannot be used with `lease`.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// // Held ten minutes at most, even if the report hangs.
/// #[distributed_lock(key = "job:nightly-report", lock_at_most = "10m")]
/// async fn nightly_report() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `max_hold`
///
/// Renews the lock while the body runs, but never past `max_hold` after it
/// was taken: then the body is stopped at its next `.await`, as on any
/// loss (the function returns `Err(LockError::Lost { .. }.into())` with
/// reason `MaxHold`), and the lock lapses in Redis by itself. Unlike
/// `lock_at_most`, the lease stays short and renewed, so a holder that
/// crashes frees the lock within a lease; `max_hold` bounds how long a
/// body that hangs keeps everyone else out. Written like `lease`; less than
/// 100 ms is an error, and so is a `max_hold` shorter than `lease` (the
/// lock would never be renewed) or one with `lock_at_most` (never renewed
/// anyway).
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// // Renewed every 10 s while the sync runs, for 15 minutes at most.
/// #[distributed_lock(key = "sync:<tenant>", lease = "30s", max_hold = "15m")]
/// async fn sync_tenant(tenant: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `lock_at_least`
///
/// Keeps the lock taken until `lock_at_least` after it was taken, even when
/// the body ends sooner: a job that finishes in a few milliseconds is then
/// not run again by another instance whose schedule fires a little later
/// (ShedLock's `lockAtLeastFor`). A body that runs longer releases the lock
/// when it ends, as usual. Written like `lease`; zero is an error, and so
/// is a value above `lock_at_most`. It applies to exclusive and fair locks
/// (`key`, `keys`, `mode = "write"`, `fair = true`): with `permits` or
/// `mode = "read"` it is an error.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// // Every instance fires each minute; the cleanup runs once per minute.
/// #[distributed_lock(key = "job:cleanup", lock_at_least = "30s", wait = "0s")]
/// async fn cleanup() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `on_busy`
///
/// What the function returns when the lock stays held by someone else for
/// the whole `wait`. `"error"`, the default, returns
/// `Err(LockError::Timeout { .. }.into())` (see [below](#when-the-lock-is-busy-timeout)).
/// `"skip"` returns `Ok(None)` without running the body, so a job that must
/// run at most once per tick tells "another instance has it" from a
/// failure. The function then returns `Result<Option<T>, E>`, and so does
/// its body, as written (`Ok(Some(..))` when it ran); any other return type
/// is a compile error on `on_busy = "skip"`. Other errors, a lost lock
/// included, are still returned as errors. With `wait = "0s"`, a busy lock
/// is skipped at once.
///
/// ```no_run
/// use lock_runtime::{distributed_lock, LockError};
///
/// #[distributed_lock(
///     key = "job:invoices",
///     wait = "0s",
///     on_busy = "skip",
///     lock_at_most = "10m",
///     lock_at_least = "30s"
/// )]
/// async fn send_invoices() -> Result<Option<usize>, LockError> {
///     let sent = 12; // ... the job ...
///     Ok(Some(sent))
/// }
///
/// # async fn tick() -> Result<(), LockError> {
/// match send_invoices().await? {
///     Some(sent) => println!("sent {sent} invoices"),
///     None => println!("another instance has the job"),
/// }
/// # Ok(())
/// # }
/// ```
///
/// ```compile_fail,E0277
/// # use lock_runtime::{distributed_lock, LockError};
/// // error[E0277]: `on_busy = "skip"` needs the function to return
/// //               `Result<Option<T>, E>`, not `Result<(), E>` (on `"skip"`)
/// #[distributed_lock(key = "job:invoices", on_busy = "skip")]
/// async fn send_invoices() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `min_replicas`
///
/// How many replicas of the Redis master must have the lock before the body
/// runs. After taking the lock, the client asks the master to `WAIT` until
/// that many replicas have it; if fewer confirm within the client's
/// [replica timeout](../lock_runtime/struct.LockClientBuilder.html#method.replica_timeout),
/// the lock is given back and the attempt fails with
/// `LockError::NotReplicated`, which is retried within `wait` (and
/// returned when the wait is over). Every renewal is confirmed the same
/// way. This keeps a lock from being granted twice when the master fails
/// and a replica takes over before the lock reached it.
///
/// Without `min_replicas`, the function uses the client's
/// [`min_replicas`](../lock_runtime/struct.LockClientBuilder.html#method.min_replicas);
/// `min_replicas = 0` turns it off for this function, for a lock that does
/// not need to survive a failover and should not wait for replicas. The
/// value is checked at compile time: a whole number from 0 to 4294967295,
/// not a string, a negative number or an expression.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockError};
/// // Runs only once a replica has the lock.
/// #[distributed_lock(key = "payout:<id>", min_replicas = 1)]
/// async fn pay_out(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
///
/// // A cache refresh: no need to wait for replicas, whatever the client says.
/// #[distributed_lock(key = "cache:<name>", min_replicas = 0)]
/// async fn refresh(name: &str) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `client`
///
/// Which [`LockClient`](../lock_runtime/struct.LockClient.html) to use: any
/// expression of the function's parameters that gives a `LockClient`, a
/// reference to one, or anything that derefs to one (`Arc<LockClient>`).
/// It is evaluated and cloned before the body runs, so the body may borrow
/// `self` mutably even when the client is a field of `self`. Without
/// `client`, the function uses the client given to `lock_runtime::install`;
/// when none was installed, it returns `LockError::NotInstalled`.
///
/// ```
/// # use lock_runtime::{distributed_lock, LockClient, LockError};
/// struct Stock {
///     locks: LockClient,
///     reserved: u32,
/// }
///
/// impl Stock {
///     #[distributed_lock(key = "sku:<sku>", client = self.locks)]
///     async fn reserve(&mut self, sku: &str) -> Result<u32, LockError> {
///         self.reserved += 1;
///         Ok(self.reserved)
///     }
/// }
/// ```
///
/// ## `crate`
///
/// Where the runtime is, when it is not a direct dependency named
/// `lock_runtime` (for instance re-exported by a crate of yours). The
/// expansion refers to the runtime only through this path.
///
/// ```
/// # use lock_runtime::LockError;
/// mod platform {
///     pub use lock_runtime as locks;
/// }
///
/// #[lock_runtime::distributed_lock(key = "cache:warm", crate = "platform::locks")]
/// async fn warm_cache() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// # When the lock is busy: timeout
///
/// When the lock stays held by someone else for the whole `wait`, the body
/// does not run, and the function returns
/// `Err(LockError::Timeout { .. }.into())` (or `Ok(None)` with
/// [`on_busy = "skip"`](#on_busy)):
///
/// ```no_run
/// # use lock_runtime::{distributed_lock, LockError};
/// #[distributed_lock(key = "job:reindex", wait = "0s")]
/// async fn reindex() -> Result<(), LockError> {
///     Ok(())
/// }
///
/// # async fn run() -> Result<(), LockError> {
/// match reindex().await {
///     Ok(()) => println!("reindexed"),
///     Err(err) if err.is_timeout() => println!("another instance is reindexing"),
///     Err(err) => return Err(err),
/// }
/// # Ok(())
/// # }
/// ```
///
/// # When the lock is lost
///
/// If the lock is lost while the body runs (a renewal finds it deleted or
/// taken over, or Redis stays unreachable until the lease could have run
/// out, or a [`lock_at_most`](#lock_at_most) runs out), the body is dropped
/// at its next `.await` and the function returns
/// `Err(LockError::Lost { .. }.into())`. Mutual exclusion is the promise: a
/// body that kept running without its lock would break it. Code between two
/// `.await`s still runs to the next one, so storage that must reject stale
/// writers should check the fencing token (see below).
///
/// # Inside the body
///
/// [`lock_runtime::current()`](../lock_runtime/fn.current.html) names the
/// held lock (the first by key, with `keys`; [`current_locks()`](../lock_runtime/fn.current_locks.html)
/// names them all) and its fencing token, a number that grows with every new
/// holder of the lock; hand it to the storage you write to. A call to
/// another locked function on the same key through the same client, in the
/// same task, re-enters the lock instead of waiting for itself; a task
/// spawned from the body is another owner, and waits.
///
/// ```no_run
/// # use lock_runtime::{distributed_lock, LockError};
/// #[distributed_lock(key = "account:<id>")]
/// async fn transfer(id: u64, cents: i64) -> Result<(), LockError> {
///     let held = lock_runtime::current().expect("inside the lock");
///     assert_eq!(held.name, format!("account:{id}"));
///     audit(id).await // same key, same task: re-enters
/// }
///
/// #[distributed_lock(key = "account:<id>")]
/// async fn audit(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// # Mistakes are compile errors
///
/// The options, the key template and the signature are checked when the
/// function is compiled. Each error points at the offending token, says
/// what would be right, and all of them are reported together:
///
/// ```compile_fail
/// # use lock_runtime::{distributed_lock, LockError};
/// // error: `<order>`: `order` is not a parameter of `settle`; did you mean
/// //        `order_id`? the only parameter is `order_id`
/// // error: `lease`: `30sec`: unknown unit `sec`; use `ms`, `s`, `m` or `h`
/// #[distributed_lock(key = "order:<order>", lease = "30sec")]
/// async fn settle(order_id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// Options that ask for kinds of lock that do not go together are errors
/// too, reported on the option written second:
///
/// - `key` with `keys` (put every template in `keys`);
/// - an empty `keys`, or one template listed twice;
/// - `permits = 0`, or `permits` with `keys` (a semaphore has one name);
/// - `mode` or `fair = true` with `permits` (semaphores have no readers
///   and are not fair);
/// - `fair = true` with `mode` (read-write locks are not fair, and a fair
///   lock is not their write side);
/// - `mode = "read"` or `fair = true` with `keys` (several locks are taken
///   together exclusively);
/// - `lock_at_most` with `lease` (both set the lease), and `lock_at_least`
///   longer than `lock_at_most`;
/// - `lock_at_least` with `permits` or `mode = "read"` (it keeps an
///   exclusive or fair lock taken).
///
/// ```compile_fail
/// # use lock_runtime::{distributed_lock, LockError};
/// // error: `key` and `keys` cannot be used together: `key` names one lock,
/// //        `keys` several taken together; put every template in `keys`, or
/// //        keep only `key`
/// #[distributed_lock(key = "account:<from>", keys = ["account:<from>", "account:<to>"])]
/// async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ```compile_fail
/// # use lock_runtime::{distributed_lock, LockError};
/// // error: `permits = 0` would let nobody in: a semaphore needs at least 1 permit
/// #[distributed_lock(key = "exports", permits = 0)]
/// async fn export() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ```compile_fail
/// # use lock_runtime::{distributed_lock, LockError};
/// // error: `fair = true` cannot be used with `mode = "read"`: read-write
/// //        locks are not fair, [...]; remove `fair`, or `mode`
/// #[distributed_lock(key = "catalog", mode = "read", fair = true)]
/// async fn browse() -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// # The same without the attribute
///
/// The attribute expands to calls of the runtime; by hand, `settle` above is:
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{LockClient, LockError};
/// # struct Receipt;
/// # #[derive(Debug)] enum AppError { Lock(LockError) }
/// # impl From<LockError> for AppError { fn from(e: LockError) -> Self { AppError::Lock(e) } }
/// # async fn do_settle(_: u64) -> Result<Receipt, AppError> { Ok(Receipt) }
///
/// async fn settle(locks: &LockClient, order_id: u64) -> Result<Receipt, AppError> {
///     let guard = locks
///         .lock(format!("order:{order_id}"))
///         .lease(Duration::from_secs(30))
///         .wait(Duration::from_secs(5))
///         .acquire()
///         .await?;
///     // The critical section: `lock_runtime::current()` and re-entry work
///     // inside it, and it is dropped with `Err(Lost)` if the lock is lost.
///     let result = guard.scope(do_settle(order_id)).await?;
///     guard.release().await?;
///     result
/// }
/// ```
///
/// The other kinds of lock start from other requests, with the same
/// `lease`, `wait`, `min_replicas`, `acquire` and `scope`:
///
/// | attribute | runtime |
/// |---|---|
/// | `keys = ["a:<x>", "b:<y>"]` | [`locks.lock_all([a, b])`](../lock_runtime/struct.LockClient.html#method.lock_all) |
/// | `key = "…", permits = 3` | [`locks.semaphore(key, 3)`](../lock_runtime/struct.LockClient.html#method.semaphore) |
/// | `key = "…", mode = "read"` | [`locks.read_lock(key)`](../lock_runtime/struct.LockClient.html#method.read_lock) |
/// | `key = "…", mode = "write"` | [`locks.write_lock(key)`](../lock_runtime/struct.LockClient.html#method.write_lock), the same as `lock` |
/// | `key = "…", fair = true` | [`locks.fair_lock(key)`](../lock_runtime/struct.LockClient.html#method.fair_lock) |
///
/// and the options of scheduled jobs are options of the request:
///
/// | attribute | runtime |
/// |---|---|
/// | `lock_at_most = "10m"` | [`.lock_at_most(d)`](../lock_runtime/struct.LockRequest.html#method.lock_at_most) |
/// | `lock_at_least = "30s"` | [`.lock_at_least(d)`](../lock_runtime/struct.LockRequest.html#method.lock_at_least) |
/// | `on_busy = "skip"` | `Err(e) if e.is_timeout()` from `acquire` becomes `Ok(None)`; with `wait = "0s"`, [`.try_acquire()`](../lock_runtime/struct.LockRequest.html#method.try_acquire) |
///
/// The attribute does one thing more: when releasing fails because Redis
/// cannot be reached, it keeps the body's result (the lock then expires
/// after its lease) instead of turning it into an error.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    lock(args.into(), item.into()).into()
}

/// Parse, validate, expand. On any error, the function is emitted unchanged
/// next to the errors, so that its callers still type-check and only the
/// attribute's errors are reported.
fn lock(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    let mut errors = attr::Errors::default();
    let options = errors.take(attr::Options::parse(args));
    let function = errors.take(syn::parse2::<valid::LockedFn>(item.clone()));
    if let Some(function) = &function {
        let keys = options.as_ref().map_or(&[][..], |options| &options.keys);
        let ret = errors.take(valid::check(function, keys));
        if let (Some(options), Some(ret)) = (&options, ret)
            && errors.is_empty()
        {
            return expand::function(function, options, ret);
        }
    }
    let errors = errors.finish().err().map(syn::Error::into_compile_error);
    quote!(#item #errors)
}

/// Every message of a (combined) error, one per line, for the unit tests.
#[cfg(test)]
fn messages(err: syn::Error) -> String {
    err.into_iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
