//! The checker's definitions on hand-made histories.

use lock_chaos::checker::{
    CrashCheck, Evicted, Fault, FaultKind, History, Holder, OPERATOR, Removal, Section, Stall,
    StuckCheck, Write, analyze, claim_end,
};
use lock_chaos::options::{LockKind, Options, Parsed, parse, parse_duration};
use lock_chaos::record::{
    CancelHow, LossKind, ReleaseOutcome, Role, SectionLine, TryOutcome, WorkerLine, WriteRequest,
};
use std::time::Duration;

const LEASE: i64 = 1_000_000;

fn holder(worker: u32, seq: u64) -> Holder {
    Holder {
        worker,
        task: 0,
        seq,
    }
}

/// A section on key 0 from `acquired` to `end` (µs), deadline `end + 500 ms`.
fn section(worker: u32, token: u64, acquired: i64, end: i64) -> Section {
    Section {
        holder: holder(worker, token),
        key: 0,
        role: Role::Exclusive,
        token,
        start: Some(acquired - 10),
        acquired,
        end,
        killed: false,
        told: None,
        reason: None,
        valid_at_told: None,
        valid_end: Some(end + 500_000),
        parent: None,
    }
}

fn history(sections: Vec<Section>) -> History {
    History {
        lease_us: LEASE,
        sections,
        ..History::default()
    }
}

#[test]
fn back_to_back_sections_do_not_overlap() {
    let figures = analyze(&history(vec![
        section(1, 1, 0, 100),
        section(2, 2, 100, 200),
        section(1, 3, 250, 300),
    ]));
    assert!(figures.unwarned_overlaps.is_empty());
    assert!(figures.token_regressions.is_empty());
    assert!(figures.is_safe());
    assert_eq!(figures.acquisitions, 3);
}

#[test]
fn two_untold_holders_at_once_are_an_unwarned_overlap() {
    let mut faults = history(vec![section(1, 1, 0, 1_000), section(2, 2, 400, 1_500)]);
    faults.faults.push(Fault {
        kind: FaultKind::RedisRestart,
        start: 300,
        end: 350,
        detail: String::new(),
    });
    let figures = analyze(&faults);
    assert_eq!(figures.unwarned_overlaps.len(), 1);
    let overlap = &figures.unwarned_overlaps[0];
    assert_eq!(
        (overlap.first, overlap.second),
        (holder(1, 1), holder(2, 2))
    );
    assert_eq!(overlap.overlap_us, 600);
    assert_eq!(overlap.faults, [FaultKind::RedisRestart]);
    assert_eq!(overlap.last_fault, Some(FaultKind::RedisRestart));
    assert!(!figures.is_safe());
}

#[test]
fn a_holder_told_before_the_next_acquisition_is_no_violation() {
    let mut first = section(1, 1, 0, 1_000);
    first.told = Some(350);
    first.reason = Some(LossKind::NotHeld);
    first.valid_at_told = Some(900);
    let figures = analyze(&history(vec![first.clone(), section(2, 2, 400, 1_500)]));
    assert!(figures.unwarned_overlaps.is_empty());
    assert_eq!(figures.told, 1);

    // Told a moment too late: a violation.
    first.told = Some(450);
    let figures = analyze(&history(vec![first, section(2, 2, 400, 1_500)]));
    assert_eq!(figures.unwarned_overlaps.len(), 1);
    assert_eq!(figures.unwarned_overlaps[0].overlap_us, 50);
}

#[test]
fn overlaps_on_different_keys_do_not_count() {
    let mut other = section(2, 2, 400, 1_500);
    other.key = 1;
    let figures = analyze(&history(vec![section(1, 1, 0, 1_000), other]));
    assert!(figures.unwarned_overlaps.is_empty());
}

#[test]
fn a_holder_frozen_past_its_deadline_is_counted_apart() {
    // Worker 1 froze from 100 to 3 000 000; its deadline (1 000 000) passed
    // meanwhile; it stopped (and was told) only after thawing.
    let mut frozen = section(1, 1, 0, 3_100_000);
    frozen.told = Some(3_050_000);
    frozen.reason = Some(LossKind::Expired);
    frozen.valid_at_told = Some(1_000_000);
    let stall = Stall {
        worker: 1,
        start: 100,
        end: 3_000_000,
    };
    assert_eq!(claim_end(&frozen, &[stall]), 1_000_000);
    let mut h = history(vec![frozen.clone(), section(2, 2, 1_020_000, 1_100_000)]);
    h.stalls.push(stall);
    let figures = analyze(&h);
    assert!(figures.unwarned_overlaps.is_empty());
    assert_eq!(figures.frozen_overlaps.len(), 1);
    assert_eq!(figures.frozen_notices.count, 1);
    assert_eq!(figures.late_notices, 0);

    // Without the stall the same history is a violation, and a late notice.
    let figures = analyze(&history(vec![frozen, section(2, 2, 1_020_000, 1_100_000)]));
    assert_eq!(figures.unwarned_overlaps.len(), 1);
    assert_eq!(figures.late_notices, 1);
}

#[test]
fn a_killed_holder_holds_until_its_death() {
    let mut killed = section(1, 1, 0, 500_000);
    killed.killed = true;
    killed.valid_end = None;
    let figures = analyze(&history(vec![
        killed.clone(),
        section(2, 2, 1_400_000, 1_500_000),
    ]));
    assert!(figures.unwarned_overlaps.is_empty());
    let figures = analyze(&history(vec![killed, section(2, 2, 400_000, 1_500_000)]));
    assert_eq!(figures.unwarned_overlaps.len(), 1);
}

#[test]
fn tokens_must_grow_in_acquisition_order() {
    let figures = analyze(&history(vec![
        section(1, 5, 0, 100),
        section(2, 7, 200, 300),
        section(3, 6, 400, 500),
        section(4, 7, 600, 700),
    ]));
    let low: Vec<u64> = figures.token_regressions.iter().map(|r| r.token).collect();
    assert_eq!(low, [6, 7]);
    assert_eq!(figures.token_regressions[0].earlier_max, 7);
}

fn write(worker: u32, token: u64, at: i64, accepted: bool) -> Write {
    Write {
        at,
        holder: holder(worker, token),
        key: 0,
        role: Role::Exclusive,
        token,
        begin: true,
        accepted,
        acquired: at,
    }
}

#[test]
fn an_accepted_write_after_an_equal_or_greater_token_of_another_holder_is_stale() {
    let mut h = history(vec![]);
    h.writes = vec![
        write(1, 5, 10, true),
        write(1, 5, 20, true), // same holder, end marker: fine
        write(2, 5, 30, true), // another holder with the same token
        write(3, 4, 40, true), // older token accepted: what a broken store would do
        write(4, 3, 50, false),
        write(5, 9, 60, true),
    ];
    let figures = analyze(&h);
    let stale: Vec<(u32, u64)> = figures
        .stale_accepted
        .iter()
        .map(|s| (s.write.holder.worker, s.other_token))
        .collect();
    assert_eq!(stale, [(2, 5), (3, 5)]);
    assert_eq!(figures.writes_accepted, 5);
    assert_eq!(figures.stale_rejected, 1);
}

#[test]
fn rejected_writes_are_sorted_by_whether_the_writer_still_held_the_lock() {
    let mut h = history(vec![section(1, 3, 0, 1_000), section(2, 4, 2_000, 3_000)]);
    h.writes = vec![write(1, 3, 500, false), write(1, 3, 2_500, false)];
    let figures = analyze(&h);
    assert_eq!(figures.current_rejected, 1);
    assert_eq!(figures.stale_rejected, 1);
}

#[test]
fn crashed_holders_locks_must_run_out_within_a_lease() {
    let check = |pttl_ms, held_after_lease| CrashCheck {
        worker: 1,
        key: 0,
        killed_at: 0,
        pttl_ms,
        owned_at_kill: true,
        held_after_lease,
    };
    let mut h = history(vec![]);
    h.crashes = vec![
        check(Some(800), Some(0)),
        check(Some(-1), Some(0)),
        check(Some(900), Some(1)),
        check(None, None),
    ];
    let figures = analyze(&h);
    assert_eq!(figures.crashes, 4);
    assert_eq!(figures.held_past_crash, 2);
    assert_eq!(figures.crash_unchecked, 1);
    assert_eq!(figures.crash_max_pttl_ms, Some(900));
}

#[test]
fn worker_lines_round_trip() {
    let lines = [
        WorkerLine::Hello {
            client: "0b6f5e4c-1234".into(),
        },
        WorkerLine::Section(SectionLine {
            task: 2,
            seq: 17,
            key: 1,
            role: Role::Read,
            token: 1_795_399_748_017_640,
            start: 100,
            acquired: 150,
            release: 900,
            told: Some(800),
            reason: Some(LossKind::Expired),
            valid_at_told: Some(799),
            valid_end: Some(799),
            parent: None,
        }),
        WorkerLine::Section(SectionLine {
            task: 0,
            seq: 1,
            key: 0,
            role: Role::Exclusive,
            token: 3,
            start: -5,
            acquired: 1,
            release: 2,
            told: None,
            reason: None,
            valid_at_told: None,
            valid_end: Some(3),
            parent: None,
        }),
        WorkerLine::Section(SectionLine {
            task: 1,
            seq: 9,
            key: 2,
            role: Role::Exclusive,
            token: 4,
            start: 10,
            acquired: 20,
            release: 30,
            told: Some(30),
            reason: Some(LossKind::Other),
            valid_at_told: None,
            valid_end: None,
            parent: Some(8),
        }),
        WorkerLine::Stalled { start: 1, end: 2 },
        WorkerLine::Parked {
            task: 1,
            key: 2,
            token: 9,
        },
        WorkerLine::Cancelled {
            task: 3,
            key: 1,
            how: CancelHow::Abort,
            start: 5,
            end: 60,
        },
        WorkerLine::Cancelled {
            task: 0,
            key: 0,
            how: CancelHow::Timeout,
            start: 5,
            end: 6,
        },
        WorkerLine::Exit { held: 0 },
        WorkerLine::Reentering {
            task: 1,
            seq: 7,
            key: 3,
            token: 44,
        },
        WorkerLine::ReleaseCut {
            task: 1,
            seq: 7,
            key: 3,
            at: 9,
            outcome: None,
        },
        WorkerLine::ReleaseCut {
            task: 1,
            seq: 8,
            key: 3,
            at: 9,
            outcome: Some(ReleaseOutcome::Lost),
        },
        WorkerLine::TryLock {
            key: 2,
            at: 10,
            outcome: TryOutcome::Dropped,
        },
    ];
    for line in lines {
        assert_eq!(WorkerLine::parse(&line.to_string()), Some(line));
    }
    assert_eq!(WorkerLine::parse("C 1 2"), None);
    assert_eq!(WorkerLine::parse("S 1 2 3"), None);

    let request = WriteRequest {
        worker: 3,
        task: 1,
        seq: 4,
        key: 2,
        role: Role::Permit,
        token: 99,
        begin: false,
        acquired: 12,
    };
    assert_eq!(WriteRequest::parse(&request.to_string()), Some(request));
}

#[test]
fn options_parse_and_reproduce() {
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("5 parsecs").is_err());

    let args: Vec<String> = ["--ci", "--seed", "7", "--faults=redis-restart,proxy-cut"]
        .map(String::from)
        .to_vec();
    let Ok(Parsed::Run(options)) = parse(&args) else {
        panic!("parse failed");
    };
    assert!(options.ci);
    assert_eq!(options.duration, Duration::from_secs(12));
    assert_eq!(options.kinds, LockKind::ALL);
    assert_eq!(
        options.faults,
        [FaultKind::RedisRestart, FaultKind::ProxyCut]
    );
    assert_eq!(
        options.command(),
        "cargo run --release -p lock-chaos -- --ci --seed 7 --faults redis-restart,proxy-cut"
    );
    let args: Vec<String> = ["--restart-quarantine", "0s", "--strict-quarantine"]
        .map(String::from)
        .to_vec();
    let Ok(Parsed::Run(options)) = parse(&args) else {
        panic!("parse failed");
    };
    assert_eq!(options.quarantine(), Duration::ZERO);
    assert_eq!(
        options.command(),
        "cargo run --release -p lock-chaos -- --restart-quarantine 0s --strict-quarantine"
    );
    assert_eq!(Options::default().quarantine(), Options::default().lease);
    assert!(parse(&["--faults".into(), "nope".into()]).is_err());
    assert!(parse(&["--clients".into(), "0".into()]).is_err());

    let args: Vec<String> = ["--kind", "multi,fair", "--duration", "50s"]
        .map(String::from)
        .to_vec();
    let Ok(Parsed::Run(options)) = parse(&args) else {
        panic!("parse failed");
    };
    assert_eq!(options.kinds, [LockKind::Multi, LockKind::Fair]);
    assert_eq!(
        options.command(),
        "cargo run --release -p lock-chaos -- --kind multi,fair --duration 50s"
    );
    let args: Vec<String> = ["--kind", "all"].map(String::from).to_vec();
    let Ok(Parsed::Run(options)) = parse(&args) else {
        panic!("parse failed");
    };
    assert_eq!(options.kinds, LockKind::ALL);
    assert_eq!(
        options.command(),
        "cargo run --release -p lock-chaos -- --kind all"
    );
    // Topology runs last 90 s unless said otherwise, or --duration alone
    // is given; a single-server run has none.
    let parsed = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let Ok(Parsed::Run(options)) = parse(&args) else {
            panic!("parse failed");
        };
        options
    };
    // The CI run and the full run inject every fault kind.
    let ci = parsed(&["--ci"]);
    assert_eq!(ci.faults, FaultKind::ALL.to_vec());
    assert_eq!(ci.command(), "cargo run --release -p lock-chaos -- --ci");
    let all = parsed(&["--kind", "all", "--topology", "all"]);
    assert_eq!(all.faults, FaultKind::ALL);
    assert_eq!(all.duration, Duration::from_secs(300));
    assert_eq!(all.topology_duration, Duration::from_secs(90));
    assert_eq!(
        all.command(),
        "cargo run --release -p lock-chaos -- --kind all --topology all"
    );
    let short = parsed(&["--topology", "all", "--duration", "40s"]);
    assert_eq!(short.topology_duration, Duration::from_secs(40));
    assert_eq!(
        short.command(),
        "cargo run --release -p lock-chaos -- --topology all --duration 40s"
    );
    let own = parsed(&["--topology", "cluster", "--topology-duration", "20s"]);
    assert_eq!(own.duration, Duration::from_secs(300));
    assert_eq!(own.topology_duration, Duration::from_secs(20));
    assert_eq!(
        own.command(),
        "cargo run --release -p lock-chaos -- --topology cluster --topology-duration 20s"
    );
    assert_eq!(Options::default().kinds, [LockKind::Exclusive]);
    assert!(parse(&["--kind".into(), "nope".into()]).is_err());
    let multi_one_key: Vec<String> = ["--kind", "multi", "--keys", "1"]
        .map(String::from)
        .to_vec();
    assert!(parse(&multi_one_key).is_err());
}

// Per-kind rules.

/// A section on `key` with `role` from `acquired` to `end` (µs).
fn part(
    worker: u32,
    seq: u64,
    key: u32,
    role: Role,
    token: u64,
    acquired: i64,
    end: i64,
) -> Section {
    Section {
        holder: holder(worker, seq),
        key,
        role,
        token,
        ..section(worker, token, acquired, end)
    }
}

#[test]
fn multi_key_sections_are_judged_per_key() {
    // w1 holds k0 and k1; w2 takes k1 and k2 while w1 still holds: k1 overlaps.
    let flagged = analyze(&history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        part(1, 1, 1, Role::Exclusive, 20, 0, 1_000),
        part(2, 1, 1, Role::Exclusive, 21, 500, 1_500),
        part(2, 1, 2, Role::Exclusive, 30, 500, 1_500),
    ]));
    assert_eq!(figures_keys(&flagged), [1]);
    assert_eq!(flagged.acquisitions, 2);
    assert!(!flagged.is_safe());

    // w2 takes k2 and k3 at the same time: no key in common.
    let fine = analyze(&history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        part(1, 1, 1, Role::Exclusive, 20, 0, 1_000),
        part(2, 1, 2, Role::Exclusive, 30, 500, 1_500),
        part(2, 1, 3, Role::Exclusive, 40, 500, 1_500),
    ]));
    assert!(fine.is_safe(), "{:?}", fine.unwarned_overlaps);

    // Fencing per key: w2's write to k1 with its k1 token after w1's k1 write is fine,
    // but w1 writing k1 again after w2's larger k1 token was accepted is stale.
    let mut h = history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        part(1, 1, 1, Role::Exclusive, 20, 0, 1_000),
        part(2, 1, 1, Role::Exclusive, 21, 1_000, 1_500),
    ]);
    let w = |worker, key, token, at| Write {
        holder: holder(worker, 1),
        key,
        ..write(worker, token, at, true)
    };
    h.writes = vec![w(1, 0, 10, 10), w(1, 1, 20, 11), w(2, 1, 21, 1_100)];
    assert!(analyze(&h).is_safe());
    h.writes.push(w(1, 1, 20, 1_200));
    assert_eq!(analyze(&h).stale_accepted.len(), 1);
}

fn figures_keys(figures: &lock_chaos::checker::Figures) -> Vec<u32> {
    figures.unwarned_overlaps.iter().map(|o| o.key).collect()
}

#[test]
fn semaphores_allow_up_to_n_holders_at_once() {
    let permit =
        |worker, token, acquired, end| part(worker, 1, 0, Role::Permit, token, acquired, end);
    let mut two = history(vec![permit(1, 1, 0, 1_000), permit(2, 2, 100, 1_100)]);
    two.permits = 2;
    let figures = analyze(&two);
    assert!(figures.is_safe(), "{:?}", figures.unwarned_overlaps);

    // A third holder while both are in: one violation, naming 3 holders.
    let mut three = two.clone();
    three.sections.push(permit(3, 3, 200, 300));
    // A fourth after the third left and the first released: fine again.
    three.sections.push(permit(4, 4, 1_050, 1_200));
    let figures = analyze(&three);
    assert_eq!(figures.unwarned_overlaps.len(), 1);
    let overlap = &figures.unwarned_overlaps[0];
    assert_eq!(overlap.holders, 3);
    assert_eq!(overlap.second, holder(3, 1));
    assert_eq!(overlap.overlap_us, 100);

    // With one permit it is a plain lock again.
    let mut one = two.clone();
    one.permits = 1;
    assert_eq!(analyze(&one).unwarned_overlaps.len(), 1);

    // Tokens out of acquisition order mean nothing for concurrent permit holders.
    let mut swapped = history(vec![permit(1, 9, 0, 1_000), permit(2, 8, 100, 1_100)]);
    swapped.permits = 2;
    assert!(analyze(&swapped).token_regressions.is_empty());
}

#[test]
fn permit_holders_told_of_loss_do_not_count() {
    let permit =
        |worker, token, acquired, end| part(worker, 1, 0, Role::Permit, token, acquired, end);
    let mut told = permit(1, 1, 0, 1_000);
    told.told = Some(150);
    told.reason = Some(LossKind::NotHeld);
    told.valid_at_told = Some(900);
    let mut h = history(vec![told, permit(2, 2, 100, 1_100), permit(3, 3, 200, 300)]);
    h.permits = 2;
    assert!(analyze(&h).is_safe());
}

#[test]
fn readers_share_and_writers_do_not() {
    let read = |worker, token, acquired, end| part(worker, 1, 0, Role::Read, token, acquired, end);
    let write_ =
        |worker, token, acquired, end| part(worker, 1, 0, Role::Exclusive, token, acquired, end);
    // Three readers at once, then a writer after they left: fine, and the
    // readers' tokens out of acquisition order do not count.
    let fine = analyze(&history(vec![
        read(1, 3, 0, 1_000),
        read(2, 2, 100, 900),
        read(3, 4, 200, 800),
        write_(4, 5, 1_000, 1_500),
    ]));
    assert!(fine.is_safe(), "{:?}", fine.unwarned_overlaps);

    // A writer while a reader holds: flagged; so is a reader while a writer holds.
    let writer_in = analyze(&history(vec![
        read(1, 1, 0, 1_000),
        write_(2, 2, 500, 1_500),
    ]));
    assert_eq!(writer_in.unwarned_overlaps.len(), 1);
    let reader_in = analyze(&history(vec![
        write_(1, 1, 0, 1_000),
        read(2, 2, 500, 1_500),
    ]));
    assert_eq!(reader_in.unwarned_overlaps.len(), 1);

    // A writer whose token is not above an earlier reader's is a regression.
    let low = analyze(&history(vec![read(1, 5, 0, 100), write_(2, 4, 200, 300)]));
    assert_eq!(low.token_regressions.len(), 1);

    // Readers' markers are not fenced: a reader's write with a low token is no stale write.
    let mut h = history(vec![read(1, 1, 0, 1_000), read(2, 2, 100, 1_000)]);
    let w = |worker, token, at| Write {
        holder: holder(worker, 1),
        role: Role::Read,
        ..write(worker, token, at, true)
    };
    h.writes = vec![w(2, 2, 150), w(1, 1, 200)];
    assert!(analyze(&h).is_safe());
    assert_eq!(analyze(&h).writes_accepted, 0);
}

#[test]
fn fair_grants_out_of_arrival_order_are_counted_for_information() {
    // w1 calls acquire at 0 and waits until 1_000 000; w2 arrives at 50 ms and
    // gets it at 500 ms: out of order, but no safety figure.
    let arrival = |worker, token, start: i64, acquired, end| Section {
        start: Some(start),
        ..part(worker, 1, 0, Role::Exclusive, token, acquired, end)
    };
    let figures = analyze(&history(vec![
        arrival(1, 2, 0, 1_000_000, 1_100_000),
        arrival(2, 1, 50_000, 500_000, 600_000),
        // w3 arrives 5 ms after w2: too close to call.
        arrival(3, 3, 55_000, 1_200_000, 1_300_000),
    ]));
    assert_eq!(figures.out_of_order, 1);
    // w1–w2, w1–w3 (arrived while w1 waited), but not w2–w3 (5 ms apart).
    assert_eq!(figures.waiting_pairs, 2);
    assert!(figures.is_safe());

    let in_order = analyze(&history(vec![
        arrival(1, 1, 0, 500_000, 600_000),
        arrival(2, 2, 50_000, 600_000, 700_000),
    ]));
    assert_eq!(in_order.out_of_order, 0);
    assert_eq!(in_order.waiting_pairs, 1);
    assert!(in_order.is_safe());
}

// Locked calls made inside a critical section.

/// A locked call of task 0 of worker 1, section `seq`, made inside section
/// `parent`, on `key`, without a deadline (a locked call sees no guard).
fn call(seq: u64, parent: u64, key: u32, token: u64, acquired: i64, end: i64) -> Section {
    Section {
        parent: Some(holder(1, parent)),
        valid_end: None,
        ..part(1, seq, key, Role::Exclusive, token, acquired, end)
    }
}

#[test]
fn a_reentry_is_part_of_the_section_it_reenters() {
    // Section 1 holds k0 (token 10); inside it, call 2 re-enters k0 with
    // the same token. Then w2 takes k0 after section 1 released it.
    let h = history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        call(2, 1, 0, 10, 100, 200),
        part(2, 1, 0, Role::Exclusive, 11, 1_000, 1_500),
    ]);
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.reentries, 1);
    assert_eq!(figures.nested_calls, 0);
    assert_eq!(figures.acquisitions, 3);
}

#[test]
fn joined_calls_on_one_lock_in_one_task_must_exclude_each_other() {
    // Inside section 1 (k0), calls 3 and 4 are joined, each on k1. Sharing
    // the section's owner, both were granted k1 at once, with one token:
    // two holders of k1 in the same task of the same process.
    let shared = analyze(&history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        call(2, 1, 0, 10, 50, 60),
        call(3, 1, 1, 20, 100, 300),
        call(4, 1, 1, 20, 101, 300),
    ]));
    assert_eq!(shared.nested_calls, 2);
    assert_eq!(shared.reentries, 1);
    assert_eq!(figures_keys(&shared), [1]);
    let overlap = &shared.unwarned_overlaps[0];
    assert_eq!(
        (overlap.first, overlap.second),
        (holder(1, 3), holder(1, 4))
    );
    assert_eq!(shared.token_regressions.len(), 1);
    assert!(!shared.is_safe());

    // Each with its own owner: the second waits for the first, and gets a
    // greater token.
    let apart = analyze(&history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        call(3, 1, 1, 20, 100, 300),
        call(4, 1, 1, 21, 300, 500),
    ]));
    assert!(apart.is_safe(), "{apart:?}");

    // Their writes with one token: the fence accepts both, which is stale.
    let mut h = history(vec![
        part(1, 1, 0, Role::Exclusive, 10, 0, 1_000),
        call(3, 1, 1, 20, 100, 300),
        call(4, 1, 1, 20, 101, 300),
    ]);
    let w = |seq, at| Write {
        holder: holder(1, seq),
        key: 1,
        ..write(1, 20, at, true)
    };
    h.writes = vec![w(3, 110), w(4, 111)];
    assert_eq!(analyze(&h).stale_accepted.len(), 1);
}

#[test]
fn a_token_below_one_handed_out_before_a_stale_restart_is_a_regression() {
    // Tokens 5, 6, 7 were handed out; Redis restarts from a snapshot taken
    // when the counter was at 5: the next holder gets 6 again.
    let mut h = history(vec![
        section(1, 5, 0, 100),
        section(2, 6, 200, 300),
        section(3, 7, 400, 500),
        section(4, 6, 2_000, 2_100),
    ]);
    h.faults.push(Fault {
        kind: FaultKind::RedisRestartStale,
        start: 150,
        end: 1_900,
        detail: String::new(),
    });
    let figures = analyze(&h);
    assert_eq!(figures.token_regressions.len(), 1);
    let regression = &figures.token_regressions[0];
    assert_eq!((regression.token, regression.earlier_max), (6, 7));
    assert!(!figures.is_safe());
}

#[test]
fn evicted_lock_keys_held_at_the_time_are_lost_grants() {
    let mut h = history(vec![section(1, 1, 0, 1_000), section(2, 2, 2_000, 3_000)]);
    let evicted = |name: &str, lock, holder_key, at| Evicted {
        name: name.into(),
        lock,
        holder_key,
        at,
    };
    h.evictions = vec![
        evicted("chaos:{k0}", Some(0), true, 500),
        evicted("chaos:{k0}", Some(0), true, 1_500),
        evicted("chaos:{k0}:readers", Some(0), false, 2_500),
        evicted("filler:1", None, false, 2_600),
    ];
    let figures = analyze(&h);
    assert_eq!(figures.evicted_lock_keys, 3);
    assert_eq!(figures.evicted_held, 1);
}

#[test]
fn workers_must_take_locks_again_after_a_black_hole() {
    let mut h = history(vec![
        part(1, 1, 0, Role::Exclusive, 1, 0, 100),
        part(2, 1, 0, Role::Exclusive, 2, 100, 200),
        part(3, 1, 0, Role::Exclusive, 3, 200, 300),
        // After the lift at 3 000: worker 1 at 3 500, worker 2 at 4 000.
        part(1, 2, 0, Role::Exclusive, 4, 3_500, 3_600),
        part(2, 2, 0, Role::Exclusive, 5, 4_000, 4_100),
    ]);
    h.faults.push(Fault {
        kind: FaultKind::ProxyBlackhole,
        start: 1_000,
        end: 3_000,
        detail: String::new(),
    });
    h.stopped_at = Some(10_000);
    let figures = analyze(&h);
    let recovery = figures.recoveries[0];
    assert_eq!((recovery.workers, recovery.back), (3, 2));
    assert_eq!(recovery.first_grant, Some(500));
    assert_eq!(recovery.slowest, Some(1_000));
}

// Locks removed from Redis while held (force-release, DEL).

/// A removal of k0 at `at`.
fn removal(at: i64) -> Removal {
    Removal {
        key: 0,
        at,
        how: FaultKind::ForceRelease,
    }
}

/// A section of the operator's client on k0.
fn operator(seq: u64, token: u64, acquired: i64, end: i64) -> Section {
    Section {
        holder: Holder {
            worker: OPERATOR,
            task: 0,
            seq,
        },
        ..section(9, token, acquired, end)
    }
}

#[test]
fn a_force_released_holder_that_nobody_followed_is_no_violation() {
    // w1 holds k0 from 0 to 200 ms, untold; its lock is removed at 50 ms
    // and nobody takes it before w2 at 300 ms.
    let mut h = history(vec![
        section(1, 1, 0, 200_000),
        section(2, 2, 300_000, 400_000),
    ]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.removed_held, 1);
    assert!(figures.removed_overlaps.is_empty());

    // Even when it goes on untold for longer than half a lease, and even
    // when a re-entry took the lock afresh (a new token): nobody else held it.
    let mut h = history(vec![
        section(1, 1, 0, 900_000),
        call(2, 1, 0, 5, 100_000, 110_000),
        section(2, 6, 1_000_000, 1_100_000),
    ]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.regranted, 1);
}

#[test]
fn a_force_released_holder_told_in_time_overlaps_apart() {
    // Removed at 50 ms; the operator takes k0 at 52 ms and holds it 30 ms;
    // w1 is told at its next renewal (300 ms), within half a lease.
    let mut first = section(1, 1, 0, 400_000);
    first.told = Some(300_000);
    first.reason = Some(LossKind::NotHeld);
    first.valid_at_told = Some(900_000);
    let mut h = history(vec![first.clone(), operator(1, 2, 52_000, 82_000)]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.removed_overlaps.len(), 1);
    assert_eq!(figures.removed_overlaps[0].first, holder(1, 1));

    // Stopped (began releasing) untold within half a lease: the same.
    let mut h = history(vec![
        section(1, 1, 0, 90_000),
        operator(1, 2, 52_000, 82_000),
    ]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.removed_overlaps.len(), 1);

    // Told only after half a lease: the runtime missed its renewal's news.
    first.told = Some(700_000);
    first.end = 800_000;
    let mut h = history(vec![first, operator(1, 2, 52_000, 82_000)]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert_eq!(figures.unwarned_overlaps.len(), 1);
    assert!(figures.removed_overlaps.is_empty());
}

#[test]
fn a_reentry_granted_after_another_held_the_removed_lock_is_an_overlap() {
    // w1 (token 1) holds k0; removed at 50 ms; the operator holds k0 from
    // 52 to 82 ms (token 2); w1 re-enters at 120 ms and is granted k0
    // afresh (token 3) instead of being told: it believes it held k0 all
    // along while the operator held it.
    let mut h = history(vec![
        section(1, 1, 0, 200_000),
        call(2, 1, 0, 3, 120_000, 125_000),
        operator(1, 2, 52_000, 82_000),
    ]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
    let overlap = &figures.unwarned_overlaps[0];
    assert_eq!(overlap.first, holder(1, 1));
    assert_eq!(overlap.second.worker, OPERATOR);
    assert_eq!(figures.regranted, 1);
    assert!(!figures.is_safe());

    // The re-entry failed as Lost and told the holder at 120 ms: apart.
    let mut told = section(1, 1, 0, 200_000);
    told.told = Some(120_000);
    told.reason = Some(LossKind::AtReentry);
    told.valid_at_told = Some(900_000);
    let mut h = history(vec![told, operator(1, 2, 52_000, 82_000)]);
    h.removals.push(removal(50_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.removed_overlaps.len(), 1);
}

// Locks left taken by nobody after a dropped release or a failed try-lock.

fn stuck_check(what: FaultKind, gave_up: i64, free_from: i64) -> StuckCheck {
    StuckCheck {
        key: 0,
        what,
        gave_up,
        free_from,
    }
}

#[test]
fn a_lock_taken_by_nobody_for_over_half_a_lease_is_stuck() {
    // w1's release was dropped at 100 ms during a stall that ended at
    // 250 ms; the probe got k0 only at 1 100 ms (the lease ran out).
    let mut h = history(vec![
        section(1, 1, 0, 99_000),
        section(2, 2, 1_100_000, 1_110_000),
    ]);
    h.stuck_checks
        .push(stuck_check(FaultKind::ReleaseCut, 100_000, 250_000));
    h.stopped_at = Some(5_000_000);
    let figures = analyze(&h);
    assert_eq!(figures.stuck_locks, 1);
    assert_eq!(figures.stuck[0].stuck_us, 850_000);
    assert!(!figures.is_safe());

    // Taken 40 ms after the stall: fine.
    let mut h = history(vec![
        section(1, 1, 0, 99_000),
        section(2, 2, 290_000, 300_000),
    ]);
    h.stuck_checks
        .push(stuck_check(FaultKind::ReleaseCut, 100_000, 250_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.stuck[0].stuck_us, 40_000);

    // Never taken again before the run stopped.
    let mut h = history(vec![]);
    h.stuck_checks
        .push(stuck_check(FaultKind::TryLockStall, 100_000, 250_000));
    h.stopped_at = Some(3_000_000);
    let figures = analyze(&h);
    assert_eq!(figures.stuck_locks, 1);
    assert_eq!(figures.stuck[0].next, None);
}

#[test]
fn a_lock_someone_held_is_not_stuck() {
    // A try-lock gave up at 100 ms on k0, which w3 held (a long section)
    // until 1 200 ms; the probe took it at 1 210 ms: taken by nobody for
    // 10 ms only.
    let mut h = history(vec![
        section(3, 1, 0, 1_200_000),
        section(2, 2, 1_210_000, 1_220_000),
    ]);
    h.stuck_checks
        .push(stuck_check(FaultKind::TryLockStall, 100_000, 250_000));
    let figures = analyze(&h);
    assert!(figures.is_safe(), "{figures:?}");
    assert_eq!(figures.stuck[0].free_at, 1_200_000);
    assert_eq!(figures.stuck[0].stuck_us, 10_000);
}
