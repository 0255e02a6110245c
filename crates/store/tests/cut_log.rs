//! A value-log file cut short after a clean close is damage, never a torn
//! tail: the close records the head file's final size and block count in
//! the manifest, so a cut at any frame boundary or inside any frame, of
//! the head or of an older file, fails the open naming the file.

mod common;

use std::path::Path;

use common::{capturing, value_for, vlog_files as logs, Mode};
use gvault_store::{block_extents_with, Error, Store, WriteBatch, WriteOptions};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Imports records in batches, as `gvault import` does, and closes.
fn build(dir: &Path, mode: Mode) {
    let s = Store::open(dir, mode.options()).unwrap();
    for chunk in 0..40u64 {
        let mut b = WriteBatch::new();
        for i in chunk * 25..(chunk + 1) * 25 {
            let len = if i.is_multiple_of(10) { 400 } else { 40 };
            b.put(format!("rec{i:05}"), value_for(i, 0, len));
        }
        s.write(&WriteOptions::default(), b).unwrap();
    }
    s.close().unwrap();
}

/// Cuts `file` to `len` in a copy of `pristine` and opens the copy.
fn open_cut(pristine: &Path, case: &Path, file: &Path, len: u64, mode: Mode) -> Result<(), Error> {
    copy_dir(pristine, case);
    let target = case.join(file.file_name().unwrap());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap()
        .set_len(len)
        .unwrap();
    let (opts, warnings) = capturing(mode.options());
    let res = Store::open(case, opts).map(drop);
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.is_empty(),
        "a cut of a sealed file was taken as a torn tail: {w:?}"
    );
    res
}

fn cut_everywhere(mode: Mode) {
    let base = tempfile::tempdir().unwrap();
    let pristine = base.path().join("pristine");
    build(&pristine, mode);
    let files = logs(&pristine);
    // Close may have collected every older file into the head.
    assert!(!files.is_empty());
    let enc = mode.encryption();
    let mut cases = 0;
    for (fi, file) in files.iter().enumerate() {
        let frames = block_extents_with(file, enc.as_ref()).unwrap();
        // Every frame boundary after the header, and a cut inside every frame.
        let mut cuts: Vec<u64> = frames.iter().skip(1).map(|(off, _)| *off).collect();
        cuts.extend(frames.iter().skip(1).map(|(off, len)| off + len / 2));
        for (ci, cut) in cuts.into_iter().enumerate() {
            let case = base.path().join(format!("case-{fi}-{ci}"));
            match open_cut(&pristine, &case, file, cut, mode) {
                Err(Error::Corruption { file: f, .. }) => {
                    assert_eq!(f.file_name(), file.file_name(), "blames another file")
                }
                other => panic!("{} cut to {cut} bytes: open gave {other:?}", file.display()),
            }
            std::fs::remove_dir_all(&case).unwrap();
            cases += 1;
        }
    }
    assert!(cases > 40, "only {cases} cuts");
    // The pristine store still opens clean and holds every record.
    let s = Store::open(&pristine, mode.options()).unwrap();
    for i in 0..1000u64 {
        let len = if i.is_multiple_of(10) { 400 } else { 40 };
        assert_eq!(
            s.get(format!("rec{i:05}")).unwrap(),
            Some(value_for(i, 0, len))
        );
    }
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn a_cut_log_of_a_cleanly_closed_plain_store_fails_the_open() {
    cut_everywhere(Mode::Plain)
}

#[test]
fn a_cut_log_of_a_cleanly_closed_encrypted_store_fails_the_open() {
    cut_everywhere(Mode::Encrypted)
}

#[test]
fn a_cut_log_of_a_cleanly_closed_index_only_store_fails_the_open() {
    cut_everywhere(Mode::IndexOnly)
}

/// Bytes beyond the recorded size of a sealed file are ignored: they were
/// never part of the store.
#[test]
fn bytes_appended_after_a_clean_close_are_dropped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), Mode::Plain);
    let head = logs(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&head).unwrap();
    bytes.extend_from_slice(&[0xAB; 100]);
    std::fs::write(&head, bytes).unwrap();
    let (opts, warnings) = capturing(Mode::Plain.options());
    let s = Store::open(dir.path(), opts).unwrap();
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.iter().any(|m| m.contains("past the size recorded")),
        "{w:?}"
    );
    assert_eq!(s.get("rec00999").unwrap(), Some(value_for(999, 0, 40)));
    assert!(s.verify().unwrap().is_clean());
}
