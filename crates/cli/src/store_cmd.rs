//! The store commands (`gvault init`, `put`, `get`, …): the LSM store from
//! the command line.
//!
//! Exit codes: 0 success, 1 key not found, 2 error (message on stderr),
//! 3 `verify` found damage.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use gvault_store::{Options, ReadOptions, Store, WriteBatch, WriteOptions};

const EXIT_NOT_FOUND: i32 = 1;
const EXIT_ERROR: i32 = 2;
const EXIT_DAMAGED: i32 = 3;

/// Where the store lives; every command but `demo` needs it.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreDir {
    /// Store directory [default: $GVAULT_STORE].
    #[arg(long = "store", value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl StoreDir {
    fn path(&self) -> Result<PathBuf, String> {
        self.dir
            .clone()
            .or_else(|| std::env::var_os("GVAULT_STORE").map(PathBuf::from))
            .ok_or_else(|| "no store directory: pass --store DIR or set GVAULT_STORE".into())
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {
    /// Create an empty store.
    Init {
        #[command(flatten)]
        store: StoreDir,
    },
    /// Write one value: from the argument, from --file, or from stdin.
    Put {
        #[command(flatten)]
        store: StoreDir,
        key: String,
        #[arg(conflicts_with = "file")]
        value: Option<String>,
        /// Read the value from this file.
        #[arg(long, value_name = "F")]
        file: Option<PathBuf>,
        /// Return only once the write is on stable storage.
        #[arg(long)]
        sync: bool,
    },
    /// Print a value (raw bytes) to stdout; exit 1 if the key is absent.
    Get {
        #[command(flatten)]
        store: StoreDir,
        key: String,
    },
    /// Delete a key; exit 1 if it was absent.
    Del {
        #[command(flatten)]
        store: StoreDir,
        key: String,
    },
    /// List keys and values in [--from, --to), one "key<TAB>value" a line
    /// (bytes that are not printable are escaped).
    Scan {
        #[command(flatten)]
        store: StoreDir,
        #[arg(long, value_name = "K")]
        from: Option<String>,
        #[arg(long, value_name = "K")]
        to: Option<String>,
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Newest-key-first order (descending).
        #[arg(long)]
        reverse: bool,
        /// Print keys only.
        #[arg(long)]
        keys_only: bool,
    },
    /// Load JSON lines {"key": "...", "value": "..."} from FILE or stdin.
    Import {
        #[command(flatten)]
        store: StoreDir,
        file: Option<PathBuf>,
    },
    /// Show levels, value-log size, memtable and cache use.
    Stats {
        #[command(flatten)]
        store: StoreDir,
    },
    /// Read and check every block of every file and every live value;
    /// exit 3 if anything is damaged.
    Verify {
        #[command(flatten)]
        store: StoreDir,
    },
    /// Rewrite live values out of mostly-dead value-log files and delete
    /// the files (the background thread also does this as it runs).
    Gc {
        #[command(flatten)]
        store: StoreDir,
    },
    /// Write and read back mixed-size values in a temporary store and
    /// report throughput.
    Demo {
        /// Megabytes of values to write.
        #[arg(long, default_value_t = 256)]
        mb: u64,
    },
}

/// Runs one command; returns the process exit code.
pub fn run(cmd: StoreCommand) -> i32 {
    match execute(cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gvault: {e}");
            EXIT_ERROR
        }
    }
}

type CmdResult = Result<i32, Box<dyn std::error::Error>>;

fn open_existing(dir: &Path) -> Result<Store, gvault_store::Error> {
    Store::open(
        dir,
        Options {
            create_if_missing: false,
            ..Options::default()
        },
    )
}

fn execute(cmd: StoreCommand) -> CmdResult {
    match cmd {
        StoreCommand::Init { store } => {
            let dir = store.path()?;
            let s = Store::open(
                &dir,
                Options {
                    error_if_exists: true,
                    ..Options::default()
                },
            )?;
            s.close()?;
            println!("created an empty store in {}", dir.display());
            Ok(0)
        }
        StoreCommand::Put {
            store,
            key,
            value,
            file,
            sync,
        } => {
            let value = match (value, file) {
                (Some(v), _) => v.into_bytes(),
                (None, Some(f)) => {
                    std::fs::read(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
                }
                (None, None) => {
                    let mut v = Vec::new();
                    std::io::stdin().read_to_end(&mut v)?;
                    v
                }
            };
            let s = open_existing(&store.path()?)?;
            s.put_opt(&WriteOptions { sync }, key.as_bytes(), &value)?;
            s.close()?;
            Ok(0)
        }
        StoreCommand::Get { store, key } => {
            let s = open_existing(&store.path()?)?;
            match s.get(key.as_bytes())? {
                Some(v) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&v)?;
                    out.flush()?;
                    Ok(0)
                }
                None => {
                    eprintln!("gvault store: key {key:?} not found");
                    Ok(EXIT_NOT_FOUND)
                }
            }
        }
        StoreCommand::Del { store, key } => {
            let s = open_existing(&store.path()?)?;
            if s.get(key.as_bytes())?.is_none() {
                eprintln!("gvault store: key {key:?} not found");
                return Ok(EXIT_NOT_FOUND);
            }
            s.delete_opt(&WriteOptions::SYNC, key.as_bytes())?;
            s.close()?;
            Ok(0)
        }
        StoreCommand::Scan {
            store,
            from,
            to,
            limit,
            reverse,
            keys_only,
        } => {
            let s = open_existing(&store.path()?)?;
            let scan = s.scan(
                &ReadOptions::default(),
                from.as_deref().map(str::as_bytes),
                to.as_deref().map(str::as_bytes),
                reverse,
            )?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for item in scan.take(limit.unwrap_or(usize::MAX)) {
                let (k, v) = item?;
                if keys_only {
                    writeln!(out, "{}", k.escape_ascii())?;
                } else {
                    writeln!(out, "{}\t{}", k.escape_ascii(), v.escape_ascii())?;
                }
            }
            out.flush()?;
            Ok(0)
        }
        StoreCommand::Import { store, file } => import(&store.path()?, file.as_deref()),
        StoreCommand::Stats { store } => {
            let s = open_existing(&store.path()?)?;
            print!("{}", s.stats());
            Ok(0)
        }
        StoreCommand::Verify { store } => {
            let s = match open_existing(&store.path()?) {
                Ok(s) => s,
                Err(e) if e.is_corruption() => {
                    println!("the store cannot be opened: {e}");
                    return Ok(EXIT_DAMAGED);
                }
                Err(e) => return Err(e.into()),
            };
            let report = s.verify()?;
            println!("{report}");
            Ok(if report.is_clean() { 0 } else { EXIT_DAMAGED })
        }
        StoreCommand::Gc { store } => {
            let s = open_existing(&store.path()?)?;
            let r = s.gc_value_log()?;
            println!(
                "scanned {} value-log files, dropped {}, rewrote {} values ({} bytes)",
                r.files_scanned, r.files_dropped, r.values_rewritten, r.bytes_rewritten
            );
            s.close()?;
            Ok(0)
        }
        StoreCommand::Demo { mb } => demo(mb),
    }
}

#[derive(serde::Deserialize)]
struct ImportLine {
    key: String,
    value: String,
}

fn import(dir: &Path, file: Option<&Path>) -> CmdResult {
    let input: Box<dyn BufRead> = match file {
        Some(f) => Box::new(std::io::BufReader::new(
            std::fs::File::open(f).map_err(|e| format!("cannot open {}: {e}", f.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let s = open_existing(dir)?;
    let mut batch = WriteBatch::new();
    let mut count = 0u64;
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: ImportLine = serde_json::from_str(&line).map_err(|e| {
            format!(
                "line {}: expected {{\"key\": ..., \"value\": ...}}: {e}",
                i + 1
            )
        })?;
        batch.put(rec.key.as_bytes(), rec.value.as_bytes());
        count += 1;
        if batch.approximate_bytes() >= 1 << 20 {
            s.write(&WriteOptions::default(), std::mem::take(&mut batch))?;
        }
    }
    s.write(&WriteOptions::SYNC, batch)?;
    s.close()?;
    println!("imported {count} records");
    Ok(0)
}

/// Deterministic bytes for demo value `i`, cheap enough not to dominate.
fn demo_value(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn demo(mb: u64) -> CmdResult {
    const SIZES: [usize; 6] = [100, 400, 1500, 4096, 16 << 10, 100 << 10];
    let target = mb << 20;
    let tmp = tempfile::Builder::new().prefix("gvault-demo-").tempdir()?;
    let s = Store::open(tmp.path(), Options::default())?;
    println!(
        "demo store in {} ({mb} MiB of values)",
        tmp.path().display()
    );

    let bar = |len: u64, what: &str| {
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg:>6} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        b.set_message(what.to_string());
        b
    };

    let mut sizes = Vec::new();
    let mut total = 0u64;
    while total < target {
        let len = SIZES[sizes.len() % SIZES.len()];
        sizes.push(len);
        total += len as u64;
    }
    let key = |i: usize| format!("demo-{i:09}");

    let pb = bar(total, "write");
    let start = Instant::now();
    let mut batch = WriteBatch::new();
    let mut done = 0u64;
    for (i, &len) in sizes.iter().enumerate() {
        batch.put(key(i), demo_value(i as u64, len));
        done += len as u64;
        if batch.approximate_bytes() >= 1 << 20 {
            s.write(&WriteOptions::default(), std::mem::take(&mut batch))?;
            pb.set_position(done);
        }
    }
    s.write(&WriteOptions::SYNC, batch)?;
    s.flush()?;
    let write_s = start.elapsed().as_secs_f64();
    pb.finish_and_clear();

    let pb = bar(total, "read");
    let start = Instant::now();
    let mut done = 0u64;
    for (i, &len) in sizes.iter().enumerate() {
        let got = s.get(key(i))?;
        if got.as_deref() != Some(&demo_value(i as u64, len)[..]) {
            return Err(format!("read back the wrong value for {}", key(i)).into());
        }
        done += len as u64;
        if i % 256 == 0 {
            pb.set_position(done);
        }
    }
    let read_s = start.elapsed().as_secs_f64();
    pb.finish_and_clear();

    let mib = total as f64 / (1 << 20) as f64;
    println!(
        "wrote {} values, {mib:.0} MiB in {write_s:.2} s: {:.0} MiB/s (group commit, flushed to tables)",
        sizes.len(),
        mib / write_s
    );
    println!(
        "read back and checked every value in {read_s:.2} s: {:.0} MiB/s",
        mib / read_s
    );
    print!("{}", s.stats());
    s.close()?;
    Ok(0)
}
