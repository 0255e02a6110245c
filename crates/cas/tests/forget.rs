//! `forget` retention policies over snapshots at fabricated times.

use std::collections::BTreeSet;
use std::fs;

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::backend::Kind;
use gvault_cas::{forget_with, InitOptions, Policy, Repository, Snapshot, Span};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;

const HOUR: i64 = 3_600_000_000_000;
const DAY: i64 = 24 * HOUR;

/// Nanoseconds of 2024-MM-DD HH:00 UTC (2024 is a leap year).
fn t(month: u32, day: u32, hour: i64) -> i64 {
    let before = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30];
    let doy: i64 = before[..month as usize].iter().sum::<i64>() + day as i64 - 1;
    // 2024-01-01 is 19,723 days after 1970-01-01.
    (19_723 + doy) * DAY + hour * HOUR
}

struct Fixture {
    _dir: tempfile::TempDir,
    repo: Repository,
    /// Group A, newest first.
    a: Vec<String>,
    /// Group B (another host), newest first.
    b: Vec<String>,
}

fn fixture() -> Fixture {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"some data").unwrap();
    let enc = Encryption::with_key(generate_key());
    let repo = Repository::init(
        &d.path().join("repo"),
        &enc,
        InitOptions::default(),
        cpu_backend(),
    )
    .unwrap();
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let base = Snapshot::read(&repo, &s.snapshot).unwrap();
    repo.backend.delete(Kind::Snapshot, &s.snapshot).unwrap();
    let write = |host: &[u8], time_ns: i64| {
        let mut s = base.clone();
        s.hostname = host.to_vec();
        s.time_ns = time_ns;
        s.write(&repo).unwrap()
    };
    // Newest first. 2024-03-04 is a Monday (ISO week 10); 02-28 to 03-03
    // are week 9.
    let a_times = [
        t(3, 4, 10),
        t(3, 3, 10),
        t(3, 2, 10),
        t(3, 1, 20),
        t(3, 1, 8),
        t(2, 28, 9),
        t(2, 10, 10),
        t(1, 15, 10),
        t(1, 1, 10),
    ];
    let a = a_times.iter().map(|&x| write(b"hostA", x)).collect();
    let b = [t(3, 2, 0), t(1, 1, 0)]
        .iter()
        .map(|&x| write(b"hostB", x))
        .collect();
    Fixture {
        _dir: d,
        repo,
        a,
        b,
    }
}

fn names(v: &[String], idx: &[usize]) -> BTreeSet<String> {
    idx.iter().map(|&i| v[i].clone()).collect()
}

/// Applies `p` for real and checks that exactly the snapshots of group A
/// at `keep_a` (newest first) and of group B at `keep_b` remain.
fn expect(p: Policy, keep_a: &[usize], keep_b: &[usize]) {
    let f = fixture();
    let dry = forget_with(&f.repo, &p, true).unwrap();
    assert_eq!(f.repo.backend.list(Kind::Snapshot).unwrap().len(), 11);
    let r = forget_with(&f.repo, &p, false).unwrap();
    assert_eq!(dry.removed, r.removed);
    let left: BTreeSet<String> = f
        .repo
        .backend
        .list(Kind::Snapshot)
        .unwrap()
        .into_iter()
        .collect();
    let mut want = names(&f.a, keep_a);
    want.extend(names(&f.b, keep_b));
    assert_eq!(left, want, "{p:?}: {:#?}", r.decisions);
    let kept: BTreeSet<String> = r
        .decisions
        .iter()
        .filter(|d| !d.reasons.is_empty())
        .map(|d| d.snapshot.clone())
        .collect();
    assert_eq!(kept, want);
}

#[test]
fn keep_last() {
    expect(Policy::keep_last(2), &[0, 1], &[0, 1]);
    expect(Policy::keep_last(1), &[0], &[0]);
}

#[test]
fn keep_daily_takes_the_newest_of_each_day() {
    let p = Policy {
        daily: 5,
        ..Policy::default()
    };
    // 03-01 has two snapshots: the 20:00 one is kept, the 08:00 one not.
    expect(p, &[0, 1, 2, 3, 5], &[0, 1]);
}

#[test]
fn keep_weekly_uses_iso_weeks() {
    let p = Policy {
        weekly: 3,
        ..Policy::default()
    };
    // Week 10 (03-04), week 9 (newest: 03-03), week 6 (02-10).
    expect(p, &[0, 1, 6], &[0, 1]);
}

#[test]
fn keep_monthly() {
    let p = Policy {
        monthly: 3,
        ..Policy::default()
    };
    expect(p, &[0, 5, 7], &[0, 1]);
}

#[test]
fn keep_within_counts_back_from_the_newest_snapshot() {
    let p = Policy {
        within: Some("3d".parse::<Span>().unwrap()),
        ..Policy::default()
    };
    // Newer than 03-01 10:00 (group A) and than 02-28 00:00 (group B).
    expect(p, &[0, 1, 2, 3], &[0]);
    let p = Policy {
        within: Some("1m12d".parse::<Span>().unwrap()),
        ..Policy::default()
    };
    // Newer than 01-23 10:00 (03-04 less a month is 02-04, less 12 days).
    expect(p, &[0, 1, 2, 3, 4, 5, 6], &[0]);
}

#[test]
fn rules_combine_as_a_union() {
    let p = Policy {
        daily: 2,
        monthly: 2,
        ..Policy::default()
    };
    expect(p, &[0, 1, 5], &[0, 1]);
}

#[test]
fn no_rule_is_refused_and_removes_nothing() {
    let f = fixture();
    let e = forget_with(&f.repo, &Policy::default(), false).unwrap_err();
    assert!(e.to_string().contains("--keep-last"), "{e}");
    assert_eq!(f.repo.backend.list(Kind::Snapshot).unwrap().len(), 11);
}
