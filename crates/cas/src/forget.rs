//! `forget`: which snapshots a retention policy keeps, as restic decides it
//! (docs/repository.md §8). Calendar buckets are taken in UTC.

use std::collections::BTreeMap;

use crate::backend::Kind;
use crate::error::{Error, Result};
use crate::repo::Repository;
use crate::snapshot;

/// A span of calendar time: `1y2m3d4h` (years, months, days, hours).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub years: i64,
    pub months: i64,
    pub days: i64,
    pub hours: i64,
}

impl std::str::FromStr for Span {
    type Err = Error;
    fn from_str(s: &str) -> Result<Span> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "duration {s:?}: {why} (write numbers with units y, m, d, h, e.g. 1y6m or 7d12h)"
            ))
        };
        let mut span = Span::default();
        let mut num = String::new();
        let mut any = false;
        for c in s.chars() {
            if c.is_ascii_digit() {
                num.push(c);
                continue;
            }
            let n: i64 = num.parse().map_err(|_| bad("a unit without a number"))?;
            if n > 100_000 {
                return Err(bad("number too large"));
            }
            num.clear();
            match c {
                'y' => span.years += n,
                'm' => span.months += n,
                'd' => span.days += n,
                'h' => span.hours += n,
                _ => return Err(bad(&format!("unknown unit {c:?}"))),
            }
            any = true;
        }
        if !num.is_empty() {
            return Err(bad("a number without a unit"));
        }
        if !any {
            return Err(bad("empty"));
        }
        Ok(span)
    }
}

/// Which snapshots of each (host, paths) group to keep; a snapshot any rule
/// keeps is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// The newest N.
    pub last: usize,
    /// The newest of each of the last N days (UTC) that have snapshots.
    pub daily: usize,
    /// The newest of each of the last N ISO weeks that have snapshots.
    pub weekly: usize,
    /// The newest of each of the last N months that have snapshots.
    pub monthly: usize,
    /// Every snapshot less than this long before the group's newest.
    pub within: Option<Span>,
}

impl Policy {
    pub fn keep_last(n: usize) -> Policy {
        Policy {
            last: n,
            ..Policy::default()
        }
    }
    fn is_empty(&self) -> bool {
        self.last == 0
            && self.daily == 0
            && self.weekly == 0
            && self.monthly == 0
            && self.within.is_none()
    }
}

/// One snapshot's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub snapshot: String,
    pub time_ns: i64,
    pub hostname: String,
    /// The rules that keep it ("last", "daily", "weekly", "monthly",
    /// "within"); empty: removed.
    pub reasons: Vec<&'static str>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForgetReport {
    /// Every snapshot, grouped, newest first within a group.
    pub decisions: Vec<Decision>,
    /// The snapshots removed (or, with a dry run, that would be).
    pub removed: Vec<String>,
}

/// Applies `policy` to each (host, paths) group; with `dry_run` only
/// reports. Removed snapshots' data stays until `prune`. A policy with no
/// rule is refused, so that forget never removes everything by omission.
pub fn forget_with(repo: &Repository, policy: &Policy, dry_run: bool) -> Result<ForgetReport> {
    if policy.is_empty() {
        return Err(Error::InvalidArgument(
            "no policy: give at least one of --keep-last, --keep-daily, --keep-weekly, \
             --keep-monthly, --keep-within"
                .into(),
        ));
    }
    type Group = (Vec<u8>, Vec<Vec<u8>>);
    let mut groups: BTreeMap<Group, Vec<(String, i64)>> = BTreeMap::new();
    for (n, s) in snapshot::headers(repo)? {
        groups
            .entry((s.hostname, s.paths))
            .or_default()
            .push((n, s.time_ns));
    }
    let mut rep = ForgetReport::default();
    for ((host, _), mut snaps) in groups {
        snaps.reverse(); // newest first
        let times: Vec<i64> = snaps.iter().map(|s| s.1).collect();
        for ((name, time_ns), reasons) in snaps.into_iter().zip(decide(policy, &times)) {
            if reasons.is_empty() {
                rep.removed.push(name.clone());
            }
            rep.decisions.push(Decision {
                snapshot: name,
                time_ns,
                hostname: String::from_utf8_lossy(&host).into_owned(),
                reasons,
            });
        }
    }
    if !dry_run {
        for n in &rep.removed {
            repo.backend.delete(Kind::Snapshot, n)?;
        }
    }
    Ok(rep)
}

/// The reasons each snapshot of one group is kept; `times` newest first.
pub fn decide(policy: &Policy, times: &[i64]) -> Vec<Vec<&'static str>> {
    type Bucket = fn(i64) -> i64;
    let day: Bucket = |t| days(t);
    let week: Bucket = iso_week;
    let month: Bucket = |t| {
        let (y, m, _) = civil(days(t));
        y * 12 + m as i64
    };
    let mut rules: [(&'static str, usize, Bucket, Option<i64>); 3] = [
        ("daily", policy.daily, day, None),
        ("weekly", policy.weekly, week, None),
        ("monthly", policy.monthly, month, None),
    ];
    let cutoff = policy
        .within
        .zip(times.first())
        .map(|(span, &newest)| minus(newest, span));
    let mut out = Vec::with_capacity(times.len());
    for (i, &t) in times.iter().enumerate() {
        let mut why = Vec::new();
        if i < policy.last {
            why.push("last");
        }
        for (name, left, bucket, last) in rules.iter_mut() {
            let b = bucket(t);
            if *left > 0 && *last != Some(b) {
                *last = Some(b);
                *left -= 1;
                why.push(*name);
            }
        }
        if cutoff.is_some_and(|c| t > c) {
            why.push("within");
        }
        out.push(why);
    }
    out
}

const NS_PER_DAY: i64 = 86_400 * 1_000_000_000;
const NS_PER_HOUR: i64 = 3_600 * 1_000_000_000;

fn days(t: i64) -> i64 {
    t.div_euclid(NS_PER_DAY)
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01
/// (H. Hinnant's civil_from_days).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + (m <= 2) as i64;
    (y, m, d)
}

/// The day count of a civil date (days_from_civil).
fn from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// ISO 8601 week of `t`, as year·100 + week.
fn iso_week(t: i64) -> i64 {
    let d = days(t);
    let weekday = (d + 3).rem_euclid(7); // Monday 0; 1970-01-01 was a Thursday
    let thursday = d - weekday + 3;
    let (y, _, _) = civil(thursday);
    y * 100 + (thursday - from_civil(y, 1, 1)) / 7 + 1
}

/// `t` minus a calendar span: years and months move the date (a day past
/// the end of the month becomes its last day), then days and hours.
fn minus(t: i64, s: Span) -> i64 {
    let d = days(t);
    let in_day = t - d * NS_PER_DAY;
    let (y, m, day) = civil(d);
    let months = y * 12 + (m as i64 - 1) - s.years * 12 - s.months;
    let (ny, nm) = (months.div_euclid(12), (months.rem_euclid(12) + 1) as u32);
    let next = if nm == 12 { (ny + 1, 1) } else { (ny, nm + 1) };
    let month_len = (from_civil(next.0, next.1, 1) - from_civil(ny, nm, 1)) as u32;
    let nd = from_civil(ny, nm, day.min(month_len)) - s.days;
    (nd * NS_PER_DAY + in_day).saturating_sub(s.hours.saturating_mul(NS_PER_HOUR))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i64, m: u32, d: u32, h: i64) -> i64 {
        from_civil(y, m, d) * NS_PER_DAY + h * NS_PER_HOUR
    }

    #[test]
    fn calendar_math() {
        for z in [-800_000, -1, 0, 1, 59, 365, 11_016, 20_000, 2_000_000] {
            let (y, m, d) = civil(z);
            assert_eq!(from_civil(y, m, d), z);
        }
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(from_civil(2024, 2, 29)), (2024, 2, 29));
        // ISO weeks: 2021-01-03 (Sunday) is in 2020-W53; 2021-01-04 in W1;
        // 2024-12-30 (Monday) is in 2025-W1.
        assert_eq!(iso_week(at(2021, 1, 3, 12)), 202053);
        assert_eq!(iso_week(at(2021, 1, 4, 0)), 202101);
        assert_eq!(iso_week(at(2024, 12, 30, 0)), 202501);
        // March 31 less one month: the last day of February.
        let s = Span {
            months: 1,
            ..Span::default()
        };
        assert_eq!(minus(at(2024, 3, 31, 5), s), at(2024, 2, 29, 5));
        let s: Span = "1y2d3h".parse().unwrap();
        assert_eq!(minus(at(2024, 3, 1, 5), s), at(2023, 2, 27, 2));
        for bad in ["", "5", "d", "3w", "1d2"] {
            assert!(bad.parse::<Span>().is_err(), "{bad}");
        }
    }
}
