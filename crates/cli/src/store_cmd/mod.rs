//! The store commands (`gvault init`, `put`, `get`, `compact`, …): the LSM store from
//! the command line.
//!
//! Exit codes: 0 success, 1 key not found, 2 error (message on stderr; a
//! missing or wrong master key included), 3 `verify` found damage.

mod demo;
mod keys;

use gvault_store::{Options, ReadOptions, Store, WriteBatch, WriteOptions, MAX_BATCH_BYTES};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

const EXIT_NOT_FOUND: i32 = 1;
const EXIT_ERROR: i32 = 2;
const EXIT_DAMAGED: i32 = 3;

/// Where the store lives; every command but `demo` needs it.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreDir {
    /// Store directory [default: $GVAULT_STORE].
    #[arg(long = "store", value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    keys: keys::KeyArgs,
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
    /// Create an empty store. With --encrypt, every block is sealed with
    /// AES-256-GCM under data keys wrapped by a master key: from --key-file
    /// F (created, mode 0600, if missing), a passphrase (--passphrase-env),
    /// $GVAULT_KEY, or by default a new key file <DIR>.key beside the store
    /// (never overwritten).
    Init {
        #[command(flatten)]
        store: StoreDir,
        /// Encrypt the store at rest.
        #[arg(long)]
        encrypt: bool,
        #[command(flatten)]
        kdf: keys::KdfArgs,
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
    /// Compact the whole store: flush, collect every value-log file at
    /// least 10% garbage, merge all tables down (dropping overwritten and
    /// deleted entries); print the sizes before and after.
    Compact {
        #[command(flatten)]
        store: StoreDir,
    },
    /// Data keys and the master key of an encrypted store.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
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

pub(crate) type CmdResult = Result<i32, Box<dyn std::error::Error>>;

/// Opens an existing store with the keys and accelerator the command line
/// names; `base` supplies the other options.
fn open_with(store: &StoreDir, base: Options) -> Result<Store, Box<dyn std::error::Error>> {
    let dir = store.path()?;
    let opts = store.keys.options(&dir)?;
    let implicit = store.keys.implicit_key_file(&dir);
    Store::open(
        &dir,
        Options {
            create_if_missing: false,
            encryption: opts.encryption,
            crypto_backend: opts.crypto_backend,
            ..base
        },
    )
    .map_err(|e| match (&e, implicit) {
        // Say where the key came from: the user named none.
        (gvault_store::Error::WrongKey { .. }, Some(f)) => format!(
            "{e} (no key source was given, so the key came from {}, the default key file beside the store; pass --key-file or another source)",
            f.display()
        )
        .into(),
        _ => e.into(),
    })
}

/// Refuses a value the store would refuse (one write batch holds at most
/// `MAX_BATCH_BYTES`) before it is read: a 50 GB file would otherwise be
/// read into memory only to be refused.
fn check_value_len(len: u64, what: &str) -> Result<(), String> {
    if len > MAX_BATCH_BYTES as u64 {
        return Err(format!(
            "{what} exceeds {MAX_BATCH_BYTES} bytes (1 GiB), the most one value holds: store larger data in pieces under several keys"
        ));
    }
    Ok(())
}

fn open_existing(store: &StoreDir) -> Result<Store, Box<dyn std::error::Error>> {
    open_with(store, Options::default())
}

fn execute(cmd: StoreCommand) -> CmdResult {
    match cmd {
        StoreCommand::Init {
            store,
            encrypt,
            kdf,
        } => init(&store, encrypt, &kdf),
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
                    let len = std::fs::metadata(&f)
                        .map_err(|e| format!("cannot read {}: {e}", f.display()))?
                        .len();
                    check_value_len(len, &f.display().to_string())?;
                    std::fs::read(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
                }
                (None, None) => {
                    // One byte past the limit is enough to refuse, without
                    // holding an arbitrarily long stream in memory first.
                    let mut v = Vec::new();
                    std::io::stdin()
                        .take(MAX_BATCH_BYTES as u64 + 1)
                        .read_to_end(&mut v)?;
                    check_value_len(v.len() as u64, "the value on stdin")?;
                    v
                }
            };
            let s = open_existing(&store)?;
            s.put_opt(&WriteOptions { sync }, key.as_bytes(), &value)?;
            s.close()?;
            Ok(0)
        }
        StoreCommand::Get { store, key } => {
            let s = open_existing(&store)?;
            match s.get(key.as_bytes())? {
                Some(v) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&v)?;
                    out.flush()?;
                    Ok(0)
                }
                None => {
                    eprintln!("gvault: key {key:?} not found");
                    Ok(EXIT_NOT_FOUND)
                }
            }
        }
        StoreCommand::Del { store, key } => {
            let s = open_existing(&store)?;
            if s.get(key.as_bytes())?.is_none() {
                eprintln!("gvault: key {key:?} not found");
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
            if let (Some(f), Some(t)) = (&from, &to) {
                if f > t {
                    return Err(format!(
                        "--from {f:?} comes after --to {t:?}: the range [from, to) is empty (for newest-first order, pass --reverse with the same bounds)"
                    )
                    .into());
                }
            }
            let s = open_existing(&store)?;
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
        StoreCommand::Import { store, file } => import(&store, file.as_deref()),
        StoreCommand::Stats { store } => {
            let s = open_existing(&store)?;
            print!("{}", s.stats());
            Ok(0)
        }
        StoreCommand::Verify { store } => {
            let s = match open_existing(&store) {
                Ok(s) => s,
                Err(e) => match e.downcast_ref::<gvault_store::Error>() {
                    Some(se) if se.is_corruption() => {
                        println!("the store cannot be opened: {e}");
                        return Ok(EXIT_DAMAGED);
                    }
                    _ => return Err(e),
                },
            };
            let report = s.verify()?;
            println!("{report}");
            Ok(if report.is_clean() { 0 } else { EXIT_DAMAGED })
        }
        StoreCommand::Gc { store } => {
            let s = open_existing(&store)?;
            let r = s.gc_value_log()?;
            println!(
                "scanned {} value-log files, dropped {}, rewrote {} values ({} bytes)",
                r.files_scanned, r.files_dropped, r.values_rewritten, r.bytes_rewritten
            );
            s.close()?;
            Ok(0)
        }
        StoreCommand::Compact { store } => {
            let s = open_existing(&store)?;
            let r = s.compact_all()?;
            s.close()?;
            println!(
                "compacted: {} -> {} bytes; tables {} -> {}; value-log files {} -> {}",
                r.bytes_before,
                r.bytes_after,
                r.tables_before,
                r.tables_after,
                r.vlog_files_before,
                r.vlog_files_after
            );
            println!(
                "value-log GC: read {} files, dropped {} ({} bytes), rewrote {} values ({} bytes)",
                r.gc.files_scanned,
                r.gc.files_dropped,
                r.gc.bytes_dropped,
                r.gc.values_rewritten,
                r.gc.bytes_rewritten
            );
            Ok(0)
        }
        StoreCommand::Keys(cmd) => keys::execute(cmd),
        StoreCommand::Demo { mb } => demo::demo(mb),
    }
}

#[derive(serde::Deserialize)]
struct ImportLine {
    key: String,
    value: String,
}

fn import(store: &StoreDir, file: Option<&Path>) -> CmdResult {
    let input: Box<dyn BufRead> = match file {
        Some(f) => Box::new(std::io::BufReader::new(
            std::fs::File::open(f).map_err(|e| format!("cannot open {}: {e}", f.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let s = open_existing(store)?;
    let mut batch = WriteBatch::new();
    let mut count = 0u64;
    // Records in batches already written: an import is not one transaction
    // (it is written a megabyte at a time), so an error says how far it got.
    let mut written = 0u64;
    let so_far = |written: u64| {
        if written == 0 {
            "nothing was imported".to_string()
        } else {
            format!("the first {written} records were imported (importing the file again is safe: a key's value is replaced)")
        }
    };
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("reading line {}: {e}; {}", i + 1, so_far(written)))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: ImportLine = serde_json::from_str(&line).map_err(|e| {
            format!(
                "line {}: expected {{\"key\": ..., \"value\": ...}}: {e}; {}",
                i + 1,
                so_far(written)
            )
        })?;
        batch.put(rec.key.as_bytes(), rec.value.as_bytes());
        count += 1;
        if batch.approximate_bytes() >= 1 << 20 {
            s.write(&WriteOptions::default(), std::mem::take(&mut batch))?;
            written = count;
        }
    }
    s.write(&WriteOptions::SYNC, batch)?;
    s.close()?;
    println!("imported {count} records");
    Ok(0)
}

fn init(store: &StoreDir, encrypt: bool, kdf: &keys::KdfArgs) -> CmdResult {
    let dir = store.path()?;
    if !encrypt {
        if store.keys.encryption()?.is_some() {
            return Err("a master key was given (flag or environment) without --encrypt; pass --encrypt to create an encrypted store".into());
        }
        Store::open(
            &dir,
            Options {
                error_if_exists: true,
                ..Options::default()
            },
        )?
        .close()?;
        println!("created an empty store in {}", dir.display());
        return Ok(0);
    }
    if dir.join("CURRENT").exists() {
        return Err(format!("a store already exists in {}", dir.display()).into());
    }
    let (enc, what, created_file) = keys::init_key(&dir, &store.keys, kdf)?;
    let opened = Store::open(
        &dir,
        Options {
            error_if_exists: true,
            encryption: Some(enc),
            crypto_backend: store.keys.backend()?,
            ..Options::default()
        },
    )
    .and_then(|s| s.close());
    if let Err(e) = opened {
        // A key file made for a store that does not exist would only mislead.
        if let Some(f) = created_file {
            let _ = std::fs::remove_file(f);
        }
        return Err(e.into());
    }
    println!(
        "created an empty encrypted store in {} under {what}",
        dir.display()
    );
    Ok(0)
}
