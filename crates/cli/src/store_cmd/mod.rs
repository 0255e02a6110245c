//! The store commands (`gvault init`, `put`, `get`, `compact`, …): the LSM store from
//! the command line.
//!
//! Exit codes: 0 success, 1 key not found, 2 error (message on stderr; a
//! missing or wrong master key included), 3 `verify` found damage, 141
//! stdout closed early (see `crate::output`).

mod demo;
pub(crate) mod keys;
mod records;
mod report;

use gvault_store::{Options, ReadOptions, Store, WriteOptions, MAX_BATCH_BYTES};
use records::{check_value_len, Encoding};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

const EXIT_NOT_FOUND: i32 = 1;
const EXIT_ERROR: i32 = 2;
const EXIT_DAMAGED: i32 = 3;

/// Where the store lives; every command but `demo` needs it.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreDir {
    /// Store directory [default: $GVAULT_STORE].
    #[arg(long = "store", value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Seconds to wait while another gvault process uses the store (readers
    /// share it; a writer needs it alone); 0 fails at once [default:
    /// $GVAULT_WAIT, else 30].
    #[arg(long, value_name = "SECS", value_parser = parse_wait)]
    wait: Option<Duration>,
    #[command(flatten)]
    keys: keys::KeyArgs,
}

/// How long a command waits for the store by default: one-shot commands
/// hold it for moments, so this absorbs scripts and shells running side by
/// side, yet a holder that keeps it (a long import, a server) is reported
/// within half a minute rather than waited on silently.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

fn parse_wait(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("expected seconds, 0 or more (such as 30 or 0.5); got {text:?}"))
}

impl StoreDir {
    fn path(&self) -> Result<PathBuf, String> {
        self.dir
            .clone()
            .or_else(|| std::env::var_os("GVAULT_STORE").map(PathBuf::from))
            .ok_or_else(|| "no store directory: pass --store DIR or set GVAULT_STORE".into())
    }

    /// --wait, else $GVAULT_WAIT, else `DEFAULT_WAIT`.
    fn wait(&self) -> Result<Duration, String> {
        if let Some(w) = self.wait {
            return Ok(w);
        }
        match std::env::var("GVAULT_WAIT") {
            Ok(v) if !v.is_empty() => parse_wait(&v).map_err(|e| format!("GVAULT_WAIT: {e}")),
            _ => Ok(DEFAULT_WAIT),
        }
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {
    /// Create an empty store (encrypted with --encrypt).
    ///
    /// With --encrypt, every block is sealed with AES-256-GCM under data keys wrapped by a master key: from --key-file
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
    ///
    /// A key holds at most 1 MiB; a value at most 1 GiB less its key (one
    /// write batch holds at most 1 GiB).
    Put {
        #[command(flatten)]
        store: StoreDir,
        /// The key (its UTF-8 bytes).
        key: String,
        /// The value [default: --file, else stdin].
        #[arg(conflicts_with = "file")]
        value: Option<String>,
        /// Read the value from this file.
        #[arg(long, value_name = "F")]
        file: Option<PathBuf>,
        /// Return only once the write is on stable storage.
        #[arg(long)]
        sync: bool,
        /// The value is given in hex (whitespace ignored); the bytes it
        /// spells are stored.
        #[arg(long, conflicts_with = "base64")]
        hex: bool,
        /// The value is given in base64 (standard alphabet, padding and
        /// whitespace optional); the bytes it spells are stored.
        #[arg(long)]
        base64: bool,
    },
    /// Print a value to stdout (raw bytes, as stored); exit 1 if the key is
    /// absent.
    Get {
        #[command(flatten)]
        store: StoreDir,
        /// The key (its UTF-8 bytes).
        key: String,
        /// Print the value in lowercase hex, then a newline.
        #[arg(long, conflicts_with_all = ["base64", "json"])]
        hex: bool,
        /// Print the value in base64 (standard alphabet, padded), then a
        /// newline.
        #[arg(long, conflicts_with = "json")]
        base64: bool,
        /// Print one JSON line as `export` writes it: {"key": ..., "value":
        /// ...}, with "value_b64" (base64) instead of "value" when the value
        /// is not UTF-8.
        #[arg(long)]
        json: bool,
    },
    /// Delete a key; exit 1 if it was absent.
    Del {
        #[command(flatten)]
        store: StoreDir,
        /// The key (its UTF-8 bytes).
        key: String,
    },
    /// List keys and values in [--from, --to).
    ///
    /// One "key<TAB>value" a line (bytes that are not printable are
    /// escaped), or with --json one JSON record a line.
    Scan {
        #[command(flatten)]
        store: StoreDir,
        #[command(flatten)]
        range: KeyRange,
        /// Print at most N records.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Newest-key-first order (descending).
        #[arg(long)]
        reverse: bool,
        /// Print keys only.
        #[arg(long)]
        keys_only: bool,
        /// Print JSON lines, one record a line as `export` writes them
        /// (with --keys-only, {"key": ...} alone).
        #[arg(long)]
        json: bool,
    },
    /// Write records to stdout as JSON lines, for `gvault import`.
    ///
    /// Every record in [--from, --to), in key order: {"key": "...", "value": "..."}, with "key_b64" / "value_b64"
    /// (base64) for bytes that are not UTF-8. `gvault import` reads it
    /// back exactly. Values are written in the clear, encrypted store or
    /// not.
    Export {
        #[command(flatten)]
        store: StoreDir,
        #[command(flatten)]
        range: KeyRange,
    },
    /// Read what still authenticates from a store too damaged to open.
    ///
    /// Writes every live record that can be read as JSON lines on stdout
    /// (as `export` does, for `gvault import` into a new store) and lists
    /// on stderr what could not be read: lost blocks with the key ranges
    /// they held, lost log frames, missing file tails. Writes nothing to
    /// the store. Exit 3 when anything was lost, 0 when nothing was.
    Salvage {
        #[command(flatten)]
        store: StoreDir,
        /// Print the report as one JSON object on stderr.
        #[arg(long)]
        json: bool,
    },
    /// Load JSON lines (as `gvault export` writes them) from FILE or stdin.
    ///
    /// One record a line: {"key": "...", "value": "..."}, or "key_b64" /
    /// "value_b64" for base64 bytes. Written a megabyte at a time (not one
    /// transaction: an error says how far it got, and importing again is
    /// safe); progress on stderr when it is a terminal.
    Import {
        #[command(flatten)]
        store: StoreDir,
        /// JSON-lines file [default: stdin].
        file: Option<PathBuf>,
    },
    /// Show levels, value-log size, memtable and cache use.
    Stats {
        #[command(flatten)]
        store: StoreDir,
        /// Print one JSON object (byte counts, tables per level).
        #[arg(long)]
        json: bool,
    },
    /// Read and check every block of every file and every live value;
    /// exit 3 if anything is damaged.
    Verify {
        #[command(flatten)]
        store: StoreDir,
        /// Print one JSON object: "clean", "opened", counts, and "problems"
        /// (one message each). The exit status is the same.
        #[arg(long)]
        json: bool,
    },
    /// Reclaim value-log space now.
    ///
    /// Rewrites live values out of mostly-dead value-log files and deletes
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
        // The reader of stdout went away (`gvault scan | head`): stop
        // quietly, as a Unix tool that SIGPIPE ends.
        Err(e) if crate::output::is_broken_pipe(&*e) => crate::output::EXIT_BROKEN_PIPE,
        Err(e) => {
            eprintln!("gvault: {e}");
            EXIT_ERROR
        }
    }
}

pub(crate) type CmdResult = Result<i32, Box<dyn std::error::Error>>;

/// Opens an existing store with the keys, accelerator and lock wait the
/// command line names; `base` supplies the other options.
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
            lock_timeout: store.wait()?,
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

/// Opens an existing store for writing: it waits until no other process
/// reads or writes it.
fn open_existing(store: &StoreDir) -> Result<Store, Box<dyn std::error::Error>> {
    open_with(store, Options::default())
}

/// Opens an existing store read-only, sharing it with other readers; it
/// waits only while a writer has it. Nothing on disk changes.
fn open_reader(store: &StoreDir) -> Result<Store, Box<dyn std::error::Error>> {
    open_with(store, read_only())
}

/// Options of the commands that only read.
fn read_only() -> Options {
    Options {
        read_only: true,
        ..Options::default()
    }
}

/// The keys [--from, --to) that `scan` and `export` read.
#[derive(clap::Args, Debug, Clone)]
pub struct KeyRange {
    /// First key of the range (inclusive) [default: the first key].
    #[arg(long, value_name = "K")]
    from: Option<String>,
    /// End of the range (exclusive) [default: past the last key].
    #[arg(long, value_name = "K")]
    to: Option<String>,
}

impl KeyRange {
    /// Refuses a range whose start comes after its end (before any store
    /// is opened).
    fn check(&self) -> Result<(), String> {
        if let (Some(f), Some(t)) = (&self.from, &self.to) {
            if f > t {
                return Err(format!(
                    "--from {f:?} comes after --to {t:?}: the range [from, to) is empty (for newest-first order, pass --reverse with the same bounds)"
                ));
            }
        }
        Ok(())
    }

    /// The records of the range in `s`.
    fn scan(&self, s: &Store, reverse: bool) -> gvault_store::Result<gvault_store::Scan> {
        s.scan(
            &ReadOptions::default(),
            self.from.as_deref().map(str::as_bytes),
            self.to.as_deref().map(str::as_bytes),
            reverse,
        )
    }
}

/// The value `put` stores: from the argument, a file or stdin, decoded
/// from `enc`.
fn put_value(
    value: Option<String>,
    file: Option<PathBuf>,
    enc: Encoding,
) -> Result<Vec<u8>, String> {
    let limit = enc.max_input_len();
    let what_limit = |len: u64, what: &str| {
        if enc == Encoding::Raw {
            check_value_len(len, what)
        } else if len > limit {
            Err(format!(
                "{what} is {len} bytes: too long for the {} form of a value, which holds at most {MAX_BATCH_BYTES} bytes (1 GiB)",
                enc.flag()
            ))
        } else {
            Ok(())
        }
    };
    let input = match (value, file) {
        (Some(v), _) => v.into_bytes(),
        (None, Some(f)) => {
            let len = std::fs::metadata(&f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?
                .len();
            what_limit(len, &f.display().to_string())?;
            std::fs::read(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
        }
        (None, None) => {
            // One byte past the limit is enough to refuse, without
            // holding an arbitrarily long stream in memory first.
            let mut v = Vec::new();
            std::io::stdin()
                .take(limit + 1)
                .read_to_end(&mut v)
                .map_err(|e| format!("reading the value from stdin: {e}"))?;
            what_limit(v.len() as u64, "the value on stdin")?;
            v
        }
    };
    let value = enc.decode(input)?;
    check_value_len(value.len() as u64, "the value")?;
    Ok(value)
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
            hex,
            base64,
        } => {
            let value = put_value(value, file, Encoding::from_flags(hex, base64))?;
            let s = open_existing(&store)?;
            s.put_opt(&WriteOptions { sync }, key.as_bytes(), &value)?;
            s.close()?;
            Ok(0)
        }
        StoreCommand::Get {
            store,
            key,
            hex,
            base64,
            json,
        } => {
            let s = open_reader(&store)?;
            match s.get(key.as_bytes())? {
                Some(v) => {
                    let mut out = std::io::stdout().lock();
                    if json {
                        records::write_record(&mut out, key.as_bytes(), Some(&v))?;
                    } else {
                        out.write_all(&Encoding::from_flags(hex, base64).encode(&v))?;
                    }
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
            range,
            limit,
            reverse,
            keys_only,
            json,
        } => {
            range.check()?;
            let s = open_reader(&store)?;
            let scan = range.scan(&s, reverse)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for item in scan.take(limit.unwrap_or(usize::MAX)) {
                let (k, v) = item?;
                if json {
                    records::write_record(&mut out, &k, (!keys_only).then_some(&v[..]))?;
                } else if keys_only {
                    writeln!(out, "{}", k.escape_ascii())?;
                } else {
                    writeln!(out, "{}\t{}", k.escape_ascii(), v.escape_ascii())?;
                }
            }
            out.flush()?;
            Ok(0)
        }
        StoreCommand::Export { store, range } => records::export(&store, &range),
        StoreCommand::Salvage { store, json } => records::salvage(&store, json),
        StoreCommand::Import { store, file } => records::import(&store, file.as_deref()),
        StoreCommand::Stats { store, json } => {
            let s = open_reader(&store)?;
            if json {
                report::print(&report::stats(&s.stats()))?;
            } else {
                print!("{}", s.stats());
            }
            s.close()?;
            Ok(0)
        }
        StoreCommand::Verify { store, json } => {
            let s = match open_reader(&store) {
                Ok(s) => s,
                Err(e) => match e.downcast_ref::<gvault_store::Error>() {
                    Some(se) if se.is_corruption() => {
                        if json {
                            report::print(&report::verify_unopened(&e.to_string()))?;
                        } else {
                            println!("the store cannot be opened: {e}");
                        }
                        return Ok(EXIT_DAMAGED);
                    }
                    _ => return Err(e),
                },
            };
            let pb = crate::progress::bytes("verifying", Some(0));
            let r = s.verify_with_progress(&mut |done, total| {
                pb.set_length(total);
                pb.set_position(done);
                if done >= total {
                    pb.set_message("verifying live values");
                }
            });
            pb.finish_and_clear();
            let r = r?;
            if json {
                report::print(&report::verify(&r))?;
            } else {
                println!("{r}");
            }
            s.close()?;
            Ok(if r.is_clean() { 0 } else { EXIT_DAMAGED })
        }
        StoreCommand::Gc { store } => {
            let s = open_existing(&store)?;
            let pb = crate::progress::spinner("collecting value-log garbage");
            let r = s.gc_value_log();
            pb.finish_and_clear();
            let r = r?;
            // Closed before the report, so that it reports only a clean close.
            s.close()?;
            println!(
                "scanned {} value-log files, dropped {}, rewrote {} values ({} bytes)",
                r.files_scanned, r.files_dropped, r.values_rewritten, r.bytes_rewritten
            );
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

fn init(store: &StoreDir, encrypt: bool, kdf: &keys::KdfArgs) -> CmdResult {
    let dir = store.path()?;
    if !encrypt {
        if store.keys.encryption()?.is_some() {
            let from = store.keys.source_name().unwrap_or_default();
            return Err(format!("a master key was given ({from}) without --encrypt: pass --encrypt to create an encrypted store, or drop {from} to create a plain one").into());
        }
        Store::open(
            &dir,
            Options {
                error_if_exists: true,
                lock_timeout: store.wait()?,
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
            lock_timeout: store.wait()?,
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
