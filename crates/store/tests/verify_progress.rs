//! `Store::verify_with_progress`: the bytes of every live table and
//! value-log file, reported file by file up to the total.

use gvault_store::{Options, Store};

#[test]
fn progress_counts_every_live_file_up_to_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_size: 64 << 10,
        ..Options::default()
    };
    let s = Store::open(dir.path(), opts).unwrap();
    for i in 0..300u32 {
        let len = if i % 5 == 0 { 20_000 } else { 200 };
        s.put(format!("k{i:04}"), vec![i as u8; len]).unwrap();
    }
    s.flush().unwrap();
    let mut calls = Vec::new();
    let report = s
        .verify_with_progress(&mut |done, total| calls.push((done, total)))
        .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(calls.len() as u64, report.tables + report.vlog_files);
    assert!(report.tables > 0 && report.vlog_files > 0, "{report}");
    let total = calls[0].1;
    assert!(calls.iter().all(|&(_, t)| t == total));
    assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0), "{calls:?}");
    assert_eq!(calls.last().unwrap().0, total);
    let st = s.stats();
    let table_bytes: u64 = st.levels.iter().map(|(_, b)| b).sum();
    assert_eq!(total, table_bytes + st.vlog_bytes, "{calls:?}");
}
