//! Salvage reads every record of a damaged store that authenticates, lists
//! what it could not read, and never hands out a value that was not
//! written to that key.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{value_for, Mode};
use gvault_store::{block_extents_with, salvage, SalvageReport, Store, WriteOptions};

/// Every value ever written to each key, and what a read should see now.
#[derive(Default)]
struct Model {
    history: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    now: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Model {
    fn put(&mut self, s: &Store, k: u64, ver: u64) {
        let key = format!("key{k:04}").into_bytes();
        let v = value_for(k, ver, if k.is_multiple_of(4) { 1500 } else { 30 });
        s.put(&key, &v).unwrap();
        self.history.entry(key.clone()).or_default().push(v.clone());
        self.now.insert(key, v);
    }
    fn del(&mut self, s: &Store, k: u64) {
        let key = format!("key{k:04}").into_bytes();
        s.delete(&key).unwrap();
        self.now.remove(&key);
    }
}

/// Tables on two levels, deletions, several value-log files, and records
/// only in the value log; closed cleanly.
fn build(dir: &Path, mode: Mode) -> Model {
    let s = Store::open(dir, mode.options()).unwrap();
    let mut m = Model::default();
    for k in 0..400 {
        m.put(&s, k, 0);
    }
    s.flush().unwrap();
    // Every key, but not the unbounded range: that would also replace the
    // value-log head, and these tests want one long head to damage.
    s.compact_range(Some(b"key"), None).unwrap();
    for k in (0..400).step_by(7) {
        m.del(&s, k);
    }
    for k in (0..400).step_by(3) {
        m.put(&s, k, 1);
    }
    s.flush().unwrap();
    for k in (400..440).chain((1..400).step_by(11)) {
        m.put(&s, k, 2);
    }
    s.put_opt(&WriteOptions::SYNC, b"key9999", b"end").unwrap();
    m.history
        .entry(b"key9999".to_vec())
        .or_default()
        .push(b"end".to_vec());
    m.now.insert(b"key9999".to_vec(), b"end".to_vec());
    s.close().unwrap();
    m
}

fn run(dir: &Path, mode: Mode) -> (BTreeMap<Vec<u8>, Vec<u8>>, SalvageReport) {
    let mut got = BTreeMap::new();
    let report = salvage(dir, &mode.options(), &mut |k: &[u8], v: &[u8]| {
        assert!(
            got.insert(k.to_vec(), v.to_vec()).is_none(),
            "key emitted twice"
        );
        Ok(())
    })
    .unwrap();
    assert_eq!(report.records as usize, got.len());
    (got, report)
}

/// No value that was never written to its key; every difference from the
/// model is covered by a listed problem.
fn check_honest(m: &Model, got: &BTreeMap<Vec<u8>, Vec<u8>>, report: &SalvageReport) -> usize {
    for (k, v) in got {
        let written = m.history.get(k).is_some_and(|h| h.contains(v));
        assert!(
            written,
            "salvage made up a value for {:?}",
            String::from_utf8_lossy(k)
        );
    }
    let differ = m
        .now
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .count()
        + got.keys().filter(|k| !m.now.contains_key(*k)).count();
    if differ > 0 {
        assert!(
            !report.is_clean(),
            "{differ} records differ and no problem is listed"
        );
    }
    differ
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

fn mentions(report: &SalvageReport, file: &Path, text: &str) -> bool {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    report
        .problems
        .iter()
        .any(|p| p.to_string().contains(&name) && p.to_string().contains(text))
}

fn each_mode(body: fn(Mode)) {
    for mode in [Mode::Plain, Mode::Encrypted] {
        body(mode);
    }
}

#[test]
fn an_undamaged_store_is_salvaged_whole() {
    each_mode(|mode| {
        let d = tempfile::tempdir().unwrap();
        let m = build(d.path(), mode);
        let (got, report) = run(d.path(), mode);
        assert!(report.is_clean(), "{report}");
        assert!(report.from_manifest);
        assert_eq!(got, m.now);
    });
}

#[test]
fn a_damaged_table_block_costs_only_its_keys() {
    each_mode(|mode| {
        let d = tempfile::tempdir().unwrap();
        let m = build(d.path(), mode);
        let enc = mode.encryption();
        for table in files(d.path(), "sst") {
            let case = tempfile::tempdir().unwrap();
            for f in std::fs::read_dir(d.path()).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), case.path().join(f.file_name())).unwrap();
            }
            let target = case.path().join(table.file_name().unwrap());
            let blocks = block_extents_with(&target, enc.as_ref()).unwrap();
            // Blocks: header, data blocks, filter, index, footer.
            let data = &blocks[1..blocks.len() - 3];
            let (off, len) = data[data.len() / 2];
            flip(&target, off + len / 2);
            let (got, report) = run(case.path(), mode);
            assert!(
                mentions(&report, &target, "may be missing or older"),
                "{report}"
            );
            let differ = check_honest(&m, &got, &report);
            assert!(
                differ > 0 && differ < 60,
                "{differ} records lost to one block"
            );
        }
    });
}

#[test]
fn a_damaged_frame_in_the_middle_of_the_log_costs_only_its_group() {
    each_mode(|mode| {
        let d = tempfile::tempdir().unwrap();
        let m = build(d.path(), mode);
        let head = files(d.path(), "vlog").pop().unwrap();
        let frames = block_extents_with(&head, mode.encryption().as_ref()).unwrap();
        assert!(frames.len() > 6, "{} frames", frames.len());
        let (off, len) = frames[frames.len() / 2];
        flip(&head, off + len - 1);
        assert!(Store::open(d.path(), mode.options()).is_err());
        let (got, report) = run(d.path(), mode);
        assert!(mentions(&report, &head, "are lost"), "{report}");
        let differ = check_honest(&m, &got, &report);
        assert!(differ < 10, "{differ} records lost to one frame");
        // Records after the damage are read.
        assert_eq!(
            got.get(&b"key9999"[..]).map(Vec::as_slice),
            Some(&b"end"[..])
        );
    });
}

/// The case of the report that motivated the check at close: a clean
/// close, then a value-log file cut short.
#[test]
fn a_cut_log_after_a_clean_close_is_reported_and_the_rest_read() {
    each_mode(|mode| {
        let d = tempfile::tempdir().unwrap();
        let m = build(d.path(), mode);
        // The file holding the most values (close leaves a new, empty head).
        let log = files(d.path(), "vlog")
            .into_iter()
            .max_by_key(|p| std::fs::metadata(p).unwrap().len())
            .unwrap();
        let frames = block_extents_with(&log, mode.encryption().as_ref()).unwrap();
        assert!(frames.len() > 8, "{} frames", frames.len());
        let cut = frames[frames.len() - 4].0;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let err = Store::open(d.path(), mode.options())
            .err()
            .expect("open must fail");
        assert!(err.is_corruption(), "{err}");
        let (got, report) = run(d.path(), mode);
        assert!(mentions(&report, &log, ""), "{report}");
        let differ = check_honest(&m, &got, &report);
        assert!(
            differ > 0 && differ < 60,
            "{differ} records lost to 3 frames"
        );
    });
}

#[test]
fn without_current_the_newest_manifest_is_used() {
    let mode = Mode::Encrypted;
    let d = tempfile::tempdir().unwrap();
    let m = build(d.path(), mode);
    std::fs::remove_file(d.path().join("CURRENT")).unwrap();
    let (got, report) = run(d.path(), mode);
    assert!(report.from_manifest);
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("CURRENT does not name")));
    assert_eq!(got, m.now);
}

#[test]
fn without_any_manifest_every_file_is_read() {
    let mode = Mode::Plain;
    let d = tempfile::tempdir().unwrap();
    let m = build(d.path(), mode);
    for f in std::fs::read_dir(d.path()).unwrap() {
        let p = f.unwrap().path();
        if p.to_string_lossy().contains("MANIFEST") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (got, report) = run(d.path(), mode);
    assert!(!report.from_manifest);
    check_honest(&m, &got, &report);
    // Every live record is there (deleted ones may come back from old
    // value-log files, which the report's flag says).
    for (k, v) in &m.now {
        assert_eq!(got.get(k), Some(v));
    }
}

#[test]
fn a_wrong_key_fails_before_anything_is_read() {
    let d = tempfile::tempdir().unwrap();
    build(d.path(), Mode::Encrypted);
    let mut opts = Mode::Encrypted.options();
    opts.encryption = Some(gvault_store::Encryption::with_key(
        gvault_store::keys::generate_key(),
    ));
    let r = salvage(d.path(), &opts, &mut |_: &[u8], _: &[u8]| Ok(()));
    assert!(r.is_err());
}
