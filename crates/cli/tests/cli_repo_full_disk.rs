//! A repository on a full disk: a real one, a 2 MiB tmpfs mounted in a
//! private mount namespace (`unshare`, as root or through an unprivileged
//! user namespace). A backup that runs out of space fails with a clear
//! error, leaves no partial object behind to keep the disk full, and loses
//! nothing: the earlier snapshot restores bit for bit, `check --read-data`
//! finds the repository whole, and once the data fits a backup succeeds.
//! Where no namespace can mount, the same scenario runs under a 2 MiB
//! file-size limit (`ulimit -f`: writes past it fail with EFBIG), which
//! takes the same path through the code, and says so on stderr.

use std::path::Path;
use std::process::Command;

/// $1 mount point, $2 gvault, $3 source tree, $4 directory for each
/// step's stdout, stderr and exit code, $5 `mount` (inside a namespace) or
/// `fsize`.
const SCRIPT: &str = r#"
set -u
M=$1 G=$2 SRC=$3 OUT=$4 MODE=$5
if [ "$MODE" = mount ]; then
  mount -t tmpfs -o size=2m tmpfs "$M" || exit 90
else
  # Writes past 2 MiB fail (EFBIG) instead of killing the writer.
  trap '' XFSZ
fi
export GVAULT_REPO="$M/r" GVAULT_CPU_THREADS=2
unset GVAULT_KEY GVAULT_KEY_FILE GVAULT_PASSPHRASE
step() {
  name=$1; shift
  (
    [ "$MODE" = mount ] || ulimit -f 4096
    exec "$G" repo "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  )
  echo $? >"$OUT/$name.code"
}
step init init --min-size 16K --avg-size 64K --max-size 256K
step first backup "$SRC/small"
cp -r "$SRC/big" "$SRC/small/big"
step full backup "$SRC/small"
ls -A "$M/r/data" "$M/r/index" "$M/r/snapshots" >"$OUT/left.ls" 2>&1
step check1 check --read-data
step restore1 restore "$(cat "$OUT/first.out" | sed -n 's/^snapshot \([0-9a-f]*\) saved.*/\1/p')" --target "$OUT/restored1"
rm -r "$SRC/small/big"
step fits backup "$SRC/small"
step check2 check --read-data
"#;

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

#[test]
fn a_backup_onto_a_full_disk_fails_clearly_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let small = src.join("small");
    std::fs::create_dir_all(small.join("d")).unwrap();
    std::fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..20u32 {
        let body: Vec<u8> = (0..4000u32).map(|j| (i * 31 + j % 251) as u8).collect();
        std::fs::write(small.join(format!("d/f{i}")), body).unwrap();
    }
    // 3 MB that neither deduplicates nor compresses: more than the disk.
    let mut big = vec![0u8; 3_000_000];
    rand::RngCore::fill_bytes(
        &mut <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7),
        &mut big,
    );
    std::fs::write(src.join("big/blob"), &big).unwrap();
    let mnt = tmp.path().join("mnt");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let gvault = env!("CARGO_BIN_EXE_gvault");
    let args = |c: &mut Command, mode: &str| {
        c.args(["sh", "-c", SCRIPT, "sh"])
            .arg(&mnt)
            .arg(gvault)
            .arg(&src)
            .arg(&out)
            .arg(mode);
    };
    // A user namespace first (works without root); root may mount in a
    // mount namespace of its own; else the file-size limit.
    let mut full_disk = false;
    for ns in [
        &["--user", "--map-root-user", "--mount"][..],
        &["--mount"][..],
    ] {
        let mut c = Command::new("unshare");
        c.args(ns);
        args(&mut c, "mount");
        if let Ok(s) = c.status() {
            if s.code() != Some(90) && s.code() != Some(1) {
                assert!(s.success(), "the scenario's script failed: {s:?}");
                full_disk = true;
                break;
            }
        }
    }
    if !full_disk {
        eprintln!(
            "no private mount namespace here: a 2 MiB file-size limit stands in for the full disk"
        );
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let mut c = Command::new("env");
        args(&mut c, "fsize");
        assert!(c.status().unwrap().success());
    }
    let code = |n: &str| read(&out, &format!("{n}.code")).trim().to_string();
    let err = |n: &str| read(&out, &format!("{n}.err"));
    assert_eq!(code("init"), "0", "{}", err("init"));
    assert_eq!(code("first"), "0", "{}", err("first"));
    // The failed backup: exit 2, the cause named.
    assert_eq!(code("full"), "2", "{}", err("full"));
    let cause = if full_disk {
        "No space left on device"
    } else {
        "File too large"
    };
    assert!(err("full").contains(cause), "{}", err("full"));
    // No temporary object left to hold the space.
    assert!(
        !read(&out, "left.ls").contains(".tmp-"),
        "{}",
        read(&out, "left.ls")
    );
    // The repository is whole and the earlier snapshot restores.
    assert_eq!(code("check1"), "0", "{}", err("check1"));
    assert_eq!(code("restore1"), "0", "{}", err("restore1"));
    let back = out.join("restored1").join(small.strip_prefix("/").unwrap());
    for i in 0..20u32 {
        let name = format!("d/f{i}");
        assert_eq!(
            std::fs::read(back.join(&name)).unwrap(),
            std::fs::read(small.join(&name)).unwrap(),
            "{name}"
        );
    }
    // Once the data fits again, backups work.
    assert_eq!(code("fits"), "0", "{}", err("fits"));
    assert_eq!(code("check2"), "0", "{}", err("check2"));
}
