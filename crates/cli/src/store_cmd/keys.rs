//! Master keys from the command line, the accelerator that seals blocks, and
//! the `gvault keys` commands (rotate, rotate-master, status, reencrypt).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gvault_accel::Backend;
use gvault_store::{keys, Encryption, KdfParams, Options, Store};

use super::{open_with, read_only, report, CmdResult, StoreDir};

/// Where the master key of an encrypted store comes from. The first source
/// found wins: --key-file, --passphrase-env, $GVAULT_KEY_FILE, $GVAULT_KEY
/// (64 hex digits), $GVAULT_PASSPHRASE. A store without encryption is
/// opened with no key: a key named by a flag for it is an error (the user
/// thinks the store is encrypted); one from the environment is ignored
/// with a warning (a shell that exports $GVAULT_KEY for one store still
/// reaches plain ones).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KeyArgs {
    /// Master key file (64 hex digits, mode 0600) [sources, first found
    /// wins: --key-file, --passphrase-env, $GVAULT_KEY_FILE, $GVAULT_KEY,
    /// $GVAULT_PASSPHRASE; with none, an encrypted store's <DIR>.key
    /// beside it, as `init --encrypt` makes by default].
    #[arg(long, value_name = "F", conflicts_with = "passphrase_env")]
    key_file: Option<PathBuf>,
    /// Name of an environment variable holding the passphrase (stretched
    /// with Argon2id).
    #[arg(long, value_name = "VAR")]
    passphrase_env: Option<String>,
    /// Accelerator that seals, opens, chunks and hashes: auto (the
    /// calibrated per-job choice; the GPU opens only for a job worth it),
    /// cpu, gpu (fails without a usable GPU), or service[:SOCKET] (the
    /// jobs run in `gvault serve`; without a daemon, in this process
    /// unless GVAULT_SERVICE_REQUIRE=1) [default: $GVAULT_ACCEL, else auto].
    #[arg(long, value_name = "A", value_parser = Accel::parse)]
    accel: Option<Accel>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Accel {
    Cpu,
    Gpu,
    #[default]
    Auto,
    /// The daemon at this socket.
    Service(PathBuf),
}

impl Accel {
    pub fn parse(s: &str) -> Result<Accel, String> {
        match s {
            "cpu" => Ok(Accel::Cpu),
            "gpu" => Ok(Accel::Gpu),
            "auto" => Ok(Accel::Auto),
            _ => gvault_service::socket_from_spec(s)
                .map(Accel::Service)
                .ok_or_else(|| {
                    format!("unknown accelerator {s:?}: cpu, gpu, auto, service or service:SOCKET")
                }),
        }
    }

    /// `--accel`, else `$GVAULT_ACCEL`, else auto.
    fn chosen(flag: &Option<Accel>) -> Result<Accel, String> {
        match flag {
            Some(a) => Ok(a.clone()),
            None => match env_nonempty("GVAULT_ACCEL") {
                Some(v) => Accel::parse(&v).map_err(|e| format!("GVAULT_ACCEL: {e}")),
                None => Ok(Accel::Auto),
            },
        }
    }
}

/// Argon2id costs for a passphrase-derived master key (init, rotate-master).
#[derive(clap::Args, Debug, Clone)]
pub struct KdfArgs {
    /// Argon2id memory in MiB (at least 1).
    #[arg(long, value_name = "MIB", default_value_t = KdfParams::default().m_cost_kib / 1024)]
    kdf_memory_mib: u32,
    /// Argon2id passes (at least 1).
    #[arg(long, value_name = "N", default_value_t = KdfParams::default().t_cost)]
    kdf_passes: u32,
}

impl KdfArgs {
    fn params(&self) -> Result<KdfParams, String> {
        if self.kdf_memory_mib == 0 || self.kdf_passes == 0 {
            return Err("--kdf-memory-mib and --kdf-passes must be at least 1".into());
        }
        Ok(KdfParams {
            m_cost_kib: self.kdf_memory_mib.saturating_mul(1024),
            t_cost: self.kdf_passes,
            p_cost: 1,
        })
    }
}

/// A master key source as the user named it.
enum Source {
    KeyFile(PathBuf),
    Passphrase(String),
    HexKey,
}

/// The environment variables that name a master key.
const KEY_ENV_VARS: [&str; 3] = ["GVAULT_KEY_FILE", "GVAULT_KEY", "GVAULT_PASSPHRASE"];

/// Whether `dir` holds a store without encryption: one with a pointer file
/// and no key registry.
fn is_plain_store(dir: &Path) -> bool {
    dir.join(gvault_store::format::POINTER_FILE).exists() && !dir.join(keys::KEYS_FILE).exists()
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn passphrase_from(var: &str) -> Result<Encryption, String> {
    let p = std::env::var(var).map_err(|_| {
        format!("--passphrase-env {var}: the environment variable {var} is not set (or not UTF-8)")
    })?;
    if p.is_empty() {
        return Err(format!("the passphrase in {var} is empty"));
    }
    Ok(Encryption::with_passphrase(p))
}

impl KeyArgs {
    fn source(&self) -> Option<Source> {
        if let Some(f) = &self.key_file {
            return Some(Source::KeyFile(f.clone()));
        }
        if let Some(v) = &self.passphrase_env {
            return Some(Source::Passphrase(v.clone()));
        }
        if let Some(f) = env_nonempty("GVAULT_KEY_FILE") {
            return Some(Source::KeyFile(f.into()));
        }
        if env_nonempty("GVAULT_KEY").is_some() {
            return Some(Source::HexKey);
        }
        env_nonempty("GVAULT_PASSPHRASE").map(|_| Source::Passphrase("GVAULT_PASSPHRASE".into()))
    }

    /// The variable the master key comes from, when it comes from the
    /// environment rather than a flag.
    fn env_source(&self) -> Option<&'static str> {
        if self.key_file.is_some() || self.passphrase_env.is_some() {
            return None;
        }
        KEY_ENV_VARS.into_iter().find(|v| env_nonempty(v).is_some())
    }

    /// Names the master key source for a message: the flag or variable.
    pub fn source_name(&self) -> Option<String> {
        if self.key_file.is_some() {
            return Some("--key-file".into());
        }
        if self.passphrase_env.is_some() {
            return Some("--passphrase-env".into());
        }
        self.env_source().map(|v| format!("${v}"))
    }

    /// The master key to open a store with; `None` when no source is given.
    pub fn encryption(&self) -> Result<Option<Encryption>, String> {
        Ok(Some(match self.source() {
            None => return Ok(None),
            Some(Source::KeyFile(f)) => {
                Encryption::with_key(keys::read_key_file(&f).map_err(|e| e.to_string())?)
            }
            Some(Source::Passphrase(var)) => passphrase_from(&var)?,
            Some(Source::HexKey) => {
                let hex = env_nonempty("GVAULT_KEY").unwrap_or_default();
                let k = keys::parse_hex_key(&hex).map_err(|e| format!("GVAULT_KEY: {e}"))?;
                Encryption::with_key(k)
            }
        }))
    }

    pub fn backend(&self) -> Result<Option<Arc<dyn Backend>>, String> {
        Ok(match Accel::chosen(&self.accel)? {
            Accel::Cpu => None, // the store's shared CPU backend
            Accel::Gpu => Some(Arc::new(
                gvault_accel::GpuBackend::probe()
                    .map_err(|why| format!("--accel gpu: no usable GPU: {why}"))?,
            )),
            Accel::Auto => Some(gvault_accel::AutoBackend::shared()),
            Accel::Service(socket) => {
                let required = env_nonempty("GVAULT_SERVICE_REQUIRE").is_some_and(|v| v != "0");
                Some(gvault_service::service_or_local(&socket, required)?)
            }
        })
    }

    /// The master key to open the store in `dir` with: the sources above,
    /// else the key file `gvault init --encrypt` made by default
    /// (`<store>.key` beside the store), if the store is encrypted (it has
    /// a key registry) and that file exists. A plain store never picks up a
    /// stray `.key` file.
    fn encryption_for(&self, dir: &Path) -> Result<Option<Encryption>, String> {
        if let Some(var) = self.env_source() {
            if is_plain_store(dir) {
                eprintln!(
                    "gvault: warning: ignoring ${var}: the store in {} is not encrypted",
                    dir.display()
                );
                return Ok(None);
            }
        }
        if let Some(e) = self.encryption()? {
            return Ok(Some(e));
        }
        match self.implicit_key_file(dir) {
            Some(f) => Ok(Some(Encryption::with_key(
                keys::read_key_file(&f).map_err(|e| e.to_string())?,
            ))),
            None => Ok(None),
        }
    }

    /// The default key file the store in `dir` is opened with when no key
    /// source is given (see [`Self::encryption_for`]), if any.
    pub fn implicit_key_file(&self, dir: &Path) -> Option<PathBuf> {
        if self.source().is_some() || !dir.join(keys::KEYS_FILE).exists() {
            return None;
        }
        default_key_file(dir).ok().filter(|f| f.exists())
    }

    /// Options to open the existing store in `dir` with these keys and
    /// accelerator.
    pub fn options(&self, dir: &Path) -> Result<Options, String> {
        Ok(Options {
            create_if_missing: false,
            encryption: self.encryption_for(dir)?,
            crypto_backend: self.backend()?,
            ..Options::default()
        })
    }
}

/// `<store>.key` beside the store directory: never inside it, so copying
/// the store does not copy its key.
pub fn default_key_file(store: &Path) -> Result<PathBuf, String> {
    let name = store
        .file_name()
        .ok_or_else(|| format!("cannot name a key file after {}", store.display()))?;
    let mut n = name.to_os_string();
    n.push(".key");
    Ok(store.with_file_name(n))
}

/// A key file to use: read if it exists, created (mode 0600) if not.
/// Returns the key and whether the file was created.
fn key_file_or_create(path: &Path) -> Result<(Encryption, bool), String> {
    if path.exists() {
        let k = keys::read_key_file(path).map_err(|e| e.to_string())?;
        return Ok((Encryption::with_key(k), false));
    }
    let k = keys::create_key_file(path).map_err(|e| e.to_string())?;
    Ok((Encryption::with_key(k), true))
}

/// `gvault init --encrypt`: the master key of the new store. A key file
/// that does not exist is created; `--key-file` may name an existing one
/// (one master key for several stores), the default `<store>.key` may not.
/// Returns the encryption, a description, and a key file to remove if the
/// store cannot be created.
pub fn init_key(
    store: &Path,
    k: &KeyArgs,
    kdf: &KdfArgs,
) -> Result<(Encryption, String, Option<PathBuf>), String> {
    let created = |e: Encryption, p: PathBuf, new: bool| {
        let what = if new {
            format!(
                "a new master key in {} (mode 0600); keep a copy away from this machine: without it the data cannot be read",
                p.display()
            )
        } else {
            format!("the master key in {}", p.display())
        };
        (e, what, new.then_some(p))
    };
    match k.source() {
        Some(Source::KeyFile(f)) => {
            let (e, new) = key_file_or_create(&f)?;
            Ok(created(e, f, new))
        }
        Some(Source::Passphrase(var)) => {
            let mut e = passphrase_from(&var)?;
            e.kdf = kdf.params()?;
            Ok((e, format!("a passphrase from ${var} (Argon2id)"), None))
        }
        Some(Source::HexKey) => Ok((
            k.encryption()?.expect("GVAULT_KEY is set"),
            "the master key in $GVAULT_KEY".into(),
            None,
        )),
        None => {
            let f = default_key_file(store)?;
            if f.exists() {
                return Err(format!(
                    "{} already exists; refusing to overwrite it (pass --key-file {} to use it)",
                    f.display(),
                    f.display()
                ));
            }
            // Beside the store: its parent may not exist yet (`init`
            // creates the store's directories, as a plain store's would).
            if let Some(parent) = f.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("creating {}: {e}", parent.display()))?;
            }
            let (e, new) = key_file_or_create(&f)?;
            Ok(created(e, f, new))
        }
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum KeysCommand {
    /// Make a new data key for new files; older files keep theirs until
    /// `gvault keys reencrypt` moves them.
    Rotate {
        #[command(flatten)]
        store: StoreDir,
    },
    /// Rewrap the key registry under a new master key (no data file
    /// changes); the old master key stops working.
    RotateMaster {
        #[command(flatten)]
        store: StoreDir,
        /// New master key file: used if it exists (mode 0600), created if not.
        #[arg(long, value_name = "F", required_unless_present = "new_passphrase_env")]
        new_key_file: Option<PathBuf>,
        /// Environment variable holding the new passphrase.
        #[arg(long, value_name = "VAR", conflicts_with = "new_key_file")]
        new_passphrase_env: Option<String>,
        #[command(flatten)]
        kdf: KdfArgs,
    },
    /// Show which live files use which data key.
    Status {
        #[command(flatten)]
        store: StoreDir,
        /// Print one JSON object: "current" (the key new files use), "keys"
        /// (id, state, files, bytes; id null for unsealed files),
        /// "stale_files", "index_only".
        #[arg(long)]
        json: bool,
    },
    /// Rewrite files still under older data keys and retire those keys, in
    /// the foreground (progress on a terminal); resumes an interrupted pass.
    Reencrypt {
        #[command(flatten)]
        store: StoreDir,
        /// I/O rate limit in MB/s (bytes read plus written; 0: unlimited).
        #[arg(long, value_name = "MB/S", default_value_t = 32.0)]
        rate: f64,
    },
}

pub fn execute(cmd: KeysCommand) -> CmdResult {
    match cmd {
        KeysCommand::Rotate { store } => {
            let s = open_encrypted(&store, Options::default())?;
            let id = s.rotate_data_key()?;
            s.close()?;
            println!("new data key {id}: new files use it; run `gvault keys reencrypt` to move older files to it");
            Ok(0)
        }
        KeysCommand::RotateMaster {
            store,
            new_key_file,
            new_passphrase_env,
            kdf,
        } => {
            let (new, what) = match (new_key_file, new_passphrase_env) {
                (Some(f), _) => {
                    let (e, created) = key_file_or_create(&f)?;
                    let how = if created { "new key file" } else { "key file" };
                    (e, format!("{how} {}", f.display()))
                }
                (None, Some(var)) => {
                    let mut e = passphrase_from(&var)?;
                    e.kdf = kdf.params()?;
                    (e, format!("the passphrase in ${var}"))
                }
                (None, None) => return Err("give --new-key-file or --new-passphrase-env".into()),
            };
            let implicit = store.keys.implicit_key_file(&store.path()?);
            let s = open_encrypted(&store, Options::default())?;
            s.rotate_master_key(&new)?;
            s.close()?;
            println!("the key registry is now sealed under {what}; the old master key no longer opens this store");
            if let Some(old) = implicit {
                println!(
                    "note: {} still holds the old master key, and commands given no key source read it: replace it with the new key (or remove it) and keep the old one only to open backups made before now",
                    old.display()
                );
            }
            Ok(0)
        }
        KeysCommand::Status { store, json } => {
            let s = open_encrypted(&store, read_only())?;
            let st = s.key_status()?;
            if json {
                report::print(&report::key_status(s.path(), &st))?;
            } else {
                print_status(s.path(), &st);
            }
            s.close()?;
            Ok(0)
        }
        KeysCommand::Reencrypt { store, rate } => reencrypt(&store, rate),
    }
}

fn open_encrypted(store: &StoreDir, base: Options) -> Result<Store, Box<dyn std::error::Error>> {
    let s = open_with(store, base)?;
    if !s.is_encrypted() {
        return Err(format!(
            "store {} is not encrypted; create one with `gvault init --encrypt`",
            s.path().display()
        )
        .into());
    }
    Ok(s)
}

fn print_status(dir: &Path, st: &gvault_store::KeyStatus) {
    println!(
        "{:>6}  {:<8} {:>6} {:>14}",
        "key", "state", "files", "bytes"
    );
    for r in report::key_rows(dir, st) {
        let id = r.id.map_or_else(|| "none".to_string(), |id| id.to_string());
        println!("{id:>6}  {:<8} {:>6} {:>14}", r.state, r.files, r.bytes);
    }
    if !st.unsealed.is_empty() {
        println!(
            "this store is index-only: its value log is not encrypted (values and recent keys lie on disk in the clear)"
        );
    }
    let stale = st.stale_files();
    if stale > 0 {
        println!("{stale} files under older keys: run `gvault keys reencrypt`");
    }
}

fn reencrypt(store: &StoreDir, rate_mb: f64) -> CmdResult {
    if !(rate_mb >= 0.0 && rate_mb.is_finite()) {
        return Err("--rate is MB/s, 0 or more (0: unlimited)".into());
    }
    let bytes_per_sec = if rate_mb == 0.0 {
        u64::MAX
    } else {
        ((rate_mb * 1e6) as u64).max(4096)
    };
    let s = Arc::new(open_encrypted(
        store,
        Options {
            reencrypt_bytes_per_sec: bytes_per_sec,
            ..Options::default()
        },
    )?);
    let before = s.key_status()?.stale_files();
    let start = std::time::Instant::now();
    let pb = crate::progress::spinner(&format!("re-encrypting: {before} files under older keys"));
    // The pass reports its end at once (a pass with nothing to do returns
    // in milliseconds); the progress line is refreshed five times a second.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let pass = {
        let s = s.clone();
        std::thread::spawn(move || {
            let _ = done_tx.send(s.reencrypt());
        })
    };
    let result = loop {
        match done_rx.recv_timeout(Duration::from_millis(200)) {
            Ok(r) => break r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // Files come and go while the pass runs; a failed look is
                // skipped.
                if !pb.is_hidden() {
                    if let Ok(st) = s.key_status() {
                        pb.set_message(format!(
                            "re-encrypting: {} of {before} files left under older keys",
                            st.stale_files()
                        ));
                    }
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the re-encryption thread panicked".into())
            }
        }
    };
    pb.finish_and_clear();
    pass.join()
        .map_err(|_| "the re-encryption thread panicked")?;
    let report = result?;
    let st = s.key_status()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "rewrote {} tables, {} value-log files, {} manifests ({:.1} MB read) in {secs:.1} s; retired keys {:?}; {} files left under older keys",
        report.tables_rewritten,
        report.logs_rewritten,
        report.manifests_rewritten,
        report.bytes_read as f64 / 1e6,
        report.keys_retired,
        st.stale_files()
    );
    match Arc::try_unwrap(s) {
        Ok(s) => s.close()?,
        Err(_) => return Err("the store is still in use after the pass".into()),
    }
    Ok(if st.stale_files() == 0 { 0 } else { 2 })
}
