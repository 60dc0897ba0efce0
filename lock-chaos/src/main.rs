//! `lock-chaos`: the fault suite's command line. See the crate docs and `--help`.

use std::process::ExitCode;

use lock_chaos::options::{self, LockKind, Options, Parsed, Setup, USAGE};
use lock_chaos::report::KindRun;
use lock_chaos::worker::{self, WorkerConfig};
use lock_chaos::{checker, clock, orchestrator, report};
use tokio::runtime::Runtime;

fn main() -> ExitCode {
    logs();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("__worker") {
        return run_worker(&args[1..]);
    }
    let options = match options::parse(&args) {
        Ok(Parsed::Run(options)) => *options,
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("lock-chaos: {err}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lock-chaos: cannot start a runtime: {err}");
            return ExitCode::from(2);
        }
    };
    let runs = match run_all(&options, &runtime) {
        Ok(runs) => runs,
        Err(code) => return code,
    };
    let text = report::markdown(&options, &runs);
    println!("{text}");
    if let Some(path) = &options.report
        && let Err(err) = std::fs::write(path, &text)
    {
        eprintln!("lock-chaos: cannot write {}: {err}", path.display());
        return ExitCode::from(2);
    }
    verdict(&runs)
}

/// With `RUST_LOG` set (e.g. `lock_runtime=debug`), the runtime's logs of
/// this process go to stderr, stamped with [`clock::now_us`] in ms (the
/// same clock in every worker), the process id and the thread.
fn logs() {
    struct Monotonic;
    impl tracing_subscriber::fmt::time::FormatTime for Monotonic {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            write!(
                w,
                "{:.1} ms [{}]",
                clock::now_us() as f64 / 1000.0,
                std::process::id()
            )
        }
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(Monotonic)
            .with_thread_names(true)
            .with_writer(std::io::stderr)
            .init();
    }
}

/// Worker mode: the arguments after `__worker`.
fn run_worker(args: &[String]) -> ExitCode {
    match WorkerConfig::from_args(args) {
        Some(config) => worker::run(config),
        None => {
            eprintln!("lock-chaos: bad worker arguments {args:?}");
            ExitCode::from(2)
        }
    }
}

/// Every run the options ask for, one after the other: each kind of lock
/// on a single server, then each topology with exclusive locks. A run
/// that cannot be made ends the suite (exit code 2).
fn run_all(options: &Options, runtime: &Runtime) -> Result<Vec<KindRun>, ExitCode> {
    let mut runs = Vec::new();
    // Faults the single-server runs injected so far: each goes on with the
    // plan where the previous one stopped.
    let mut planned = 0;
    for setup in options.setups() {
        // A topology run takes exclusive locks only.
        let kinds = if setup == Setup::Single {
            options.kinds.clone()
        } else {
            vec![LockKind::Exclusive]
        };
        for kind in kinds {
            let skip = if setup == Setup::Single { planned } else { 0 };
            let run = run_one(options, runtime, kind, setup, skip)?;
            if setup == Setup::Single {
                planned += run.history.faults.len();
            }
            runs.push(run);
        }
    }
    Ok(runs)
}

/// One run and the checker's figures, with progress on stderr.
fn run_one(
    options: &Options,
    runtime: &Runtime,
    kind: LockKind,
    setup: Setup,
    skip: usize,
) -> Result<KindRun, ExitCode> {
    let options = &options.for_kind(kind);
    let label = if setup == Setup::Single {
        kind.to_string()
    } else {
        format!("{} {kind}", setup.label())
    };
    eprintln!(
        "lock-chaos: {label} locks: {} clients × {} tasks, {} keys, lease {:?}, faults for {:?} (seed {})",
        options.clients,
        options.tasks,
        options.keys,
        options.lease,
        options.faults_for(setup),
        options.seed
    );
    let t0 = clock::now_us();
    let running = orchestrator::run(options, kind, setup, skip);
    let (history, info) = match runtime.block_on(running) {
        Ok(done) => done,
        Err(err) => {
            eprintln!("lock-chaos: {label}: {err}");
            return Err(ExitCode::from(2));
        }
    };
    let figures = checker::analyze(&history);
    let safety: Vec<String> = figures
        .safety()
        .iter()
        .map(|(_, n)| n.to_string())
        .collect();
    eprintln!(
        "lock-chaos: {label}: {} critical sections, safety figures {}",
        figures.acquisitions,
        safety.join(" ")
    );
    Ok(KindRun {
        kind,
        keys: options.keys,
        setup,
        info,
        history,
        figures,
        t0,
    })
}

/// Success unless a run that must be safe has a safety figure above 0;
/// the measured runs' figures are only mentioned.
fn verdict(runs: &[KindRun]) -> ExitCode {
    let failed: Vec<String> = runs
        .iter()
        .filter(|run| run.setup.must_be_safe() && !run.figures.is_safe())
        .map(|run| match run.setup {
            Setup::Single => run.kind.name().to_owned(),
            setup => setup.label(),
        })
        .collect();
    for run in runs
        .iter()
        .filter(|run| !run.setup.must_be_safe() && !run.figures.is_safe())
    {
        eprintln!(
            "lock-chaos: {}: safety figures not 0, measured (not a failure)",
            run.setup.label()
        );
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "lock-chaos: a safety figure is not 0 for: {}",
            failed.join(", ")
        );
        ExitCode::FAILURE
    }
}
