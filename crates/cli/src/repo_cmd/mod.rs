//! The repository commands (`gvault repo init`, `backup`, `restore`, …):
//! deduplicating, encrypted backups in a gvault-cas repository.
//!
//! Exit codes: 0 success, 2 error (message on stderr), 3 the command
//! finished but not everything was done or found whole: `check` found
//! damage, `restore` could not restore some files, `backup` skipped files
//! it could not read. 141: stdout closed early.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gvault_cas::{accel_jobs, Chunker, InitOptions, Repository, S3Backend, S3Options};
use serde_json::{json, Value};

use crate::store_cmd::keys::{self, KdfArgs, KeyArgs};

const EXIT_ERROR: i32 = 2;
const EXIT_INCOMPLETE: i32 = 3;

type CmdResult = Result<i32, Box<dyn std::error::Error>>;

/// Where the repository is, its key, and the output form.
#[derive(clap::Args, Debug, Clone)]
pub struct RepoArgs {
    /// Repository: a directory, or s3://BUCKET/PREFIX on S3-compatible
    /// object storage (credentials and region from AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION) [default: $GVAULT_REPO].
    #[arg(long = "repo", value_name = "DIR|s3://BUCKET/PREFIX")]
    dir: Option<PathBuf>,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    keys: KeyArgs,
    #[command(flatten)]
    s3: S3Args,
}

/// How an s3:// repository is reached.
#[derive(clap::Args, Debug, Clone)]
pub struct S3Args {
    /// The S3 server's URL for self-hosted storage (MinIO, SeaweedFS, Ceph
    /// RGW, R2…); https:// unless the server has no TLS (http://)
    /// [default: $AWS_ENDPOINT_URL, else AWS].
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// Requests to S3 in flight at most (uploads and downloads).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    s3_connections: u16,
    /// Where the index files and snapshots of s3:// repositories are cached,
    /// one directory per repository id (safe to delete at any time)
    /// [default: $XDG_CACHE_HOME/gvault/repos, else ~/.cache/gvault/repos].
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    cache_dir: Option<PathBuf>,
    /// Read every index file and snapshot from the s3:// repository (keep
    /// no local cache of them).
    #[arg(long)]
    no_cache: bool,
}

impl S3Args {
    /// The root of the metadata cache; `None`: no cache.
    fn cache_root(&self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        self.cache_dir
            .clone()
            .or_else(gvault_cas::backend_cache::default_cache_root)
    }
    fn options(&self) -> S3Options {
        S3Options {
            endpoint: self.s3_endpoint.clone(),
            connections: self.s3_connections as usize,
            ..S3Options::default()
        }
    }
}

/// Where a repository lives.
enum Location {
    Dir(PathBuf),
    S3(String),
}

impl Location {
    fn parse(p: &Path) -> Result<Location, String> {
        match p.to_str() {
            Some(s) if s.starts_with("s3://") => {
                gvault_cas::backend_s3::parse_s3_url(s).map_err(|e| e.to_string())?;
                Ok(Location::S3(s.trim_end_matches('/').to_string()))
            }
            Some(s) if s.contains("://") => Err(format!(
                "{s:?}: only local directories and s3:// repositories are supported"
            )),
            _ => Ok(Location::Dir(p.to_owned())),
        }
    }
    fn text(&self) -> String {
        match self {
            Location::Dir(d) => d.display().to_string(),
            Location::S3(u) => u.clone(),
        }
    }
}

/// Opens the repository at `loc` with the key `keys` names (for a
/// directory, else the key file `init` makes beside it, `<repo>.key`).
fn open_at(
    loc: &Location,
    keys: &KeyArgs,
    s3: &S3Args,
    accel: accel_jobs::AccelBackend,
) -> Result<Repository, Box<dyn std::error::Error>> {
    open_with(loc, keys.encryption()?, s3, accel)
}

/// [`open_at`] with the master key given (`None`: none named).
fn open_with(
    loc: &Location,
    enc: Option<gvault_store::Encryption>,
    s3: &S3Args,
    accel: accel_jobs::AccelBackend,
) -> Result<Repository, Box<dyn std::error::Error>> {
    match loc {
        Location::Dir(dir) => {
            let enc = match enc {
                Some(e) => Some(e),
                None => {
                    let f = keys::default_key_file(dir)?;
                    if f.exists() {
                        Some(gvault_store::Encryption::with_key(
                            gvault_store::keys::read_key_file(&f)?,
                        ))
                    } else {
                        None
                    }
                }
            };
            Ok(Repository::open(dir, enc.as_ref(), accel)?)
        }
        Location::S3(url) => {
            let backend = Arc::new(S3Backend::connect(url, &s3.options())?);
            Ok(Repository::open_on_cached(
                backend,
                url,
                enc.as_ref(),
                accel,
                s3.cache_root().as_deref(),
            )?)
        }
    }
}

impl RepoArgs {
    fn path(&self) -> Result<PathBuf, String> {
        self.dir
            .clone()
            .or_else(|| std::env::var_os("GVAULT_REPO").map(PathBuf::from))
            .ok_or_else(|| "no repository: pass --repo DIR or set GVAULT_REPO".into())
    }

    fn location(&self) -> Result<Location, String> {
        Location::parse(&self.path()?)
    }

    fn accel(&self) -> Result<accel_jobs::AccelBackend, String> {
        Ok(self.keys.backend()?.unwrap_or_else(accel_jobs::cpu_backend))
    }

    /// Opens the repository with the key the command line names, else the
    /// key file `init` makes beside it (`<repo>.key`) if it exists.
    fn open(&self) -> Result<Repository, Box<dyn std::error::Error>> {
        open_at(&self.location()?, &self.keys, &self.s3, self.accel()?)
    }

    /// [`RepoArgs::open`] without the metadata cache: `check` reads what
    /// the repository holds, not a good local copy of a damaged object.
    fn open_uncached(&self) -> Result<Repository, Box<dyn std::error::Error>> {
        let s3 = S3Args {
            no_cache: true,
            ..self.s3.clone()
        };
        open_at(&self.location()?, &self.keys, &s3, self.accel()?)
    }
}

/// Sizes such as 1048576, 512K, 8M (powers of 1024).
fn parse_size(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("expected a size such as 4096, 512K or 8M; got {text:?}"))
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkerKind {
    /// Content-defined (FastCDC 2020, normalized): edits shift no boundaries.
    Cdc,
    /// Fixed-size blocks (seed 001's MosaStore mode).
    Fixed,
}

#[derive(clap::Subcommand, Debug)]
pub enum RepoCommand {
    /// Create an empty repository (its master key as `gvault init --encrypt`
    /// makes one: --key-file, a passphrase, $GVAULT_KEY, or by default a new
    /// key file <DIR>.key beside it).
    Init {
        #[command(flatten)]
        repo: RepoArgs,
        #[command(flatten)]
        kdf: KdfArgs,
        /// How files are cut into chunks.
        #[arg(long, value_enum, default_value = "cdc")]
        chunker: ChunkerKind,
        /// CDC minimum chunk size.
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "512K")]
        min_size: u32,
        /// CDC average chunk size.
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1M")]
        avg_size: u32,
        /// CDC maximum chunk size.
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "8M")]
        max_size: u32,
        /// Block size of the fixed chunker.
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1M")]
        block_size: u32,
        /// Store chunks uncompressed (by default zstd, where it pays).
        #[arg(long)]
        no_compression: bool,
    },
    /// Back up files and directories (or stdin) into a new snapshot.
    ///
    /// Files unchanged since the last snapshot of the same paths on this
    /// host (size, mtime, inode) are not read again. Files that cannot be
    /// read are reported and skipped (exit 3).
    Backup {
        #[command(flatten)]
        repo: RepoArgs,
        /// Files and directories to back up.
        #[arg(required_unless_present = "stdin", conflicts_with = "stdin")]
        paths: Vec<PathBuf>,
        /// Back up standard input as one file of this name.
        #[arg(long, value_name = "NAME")]
        stdin: Option<String>,
    },
    /// List snapshots, oldest first.
    Snapshots {
        #[command(flatten)]
        repo: RepoArgs,
    },
    /// List the entries of a snapshot.
    Ls {
        #[command(flatten)]
        repo: RepoArgs,
        /// Snapshot id (a unique prefix) or `latest`.
        snapshot: String,
    },
    /// Restore a snapshot (or the entries --include selects) under a directory.
    ///
    /// Every chunk's id is checked after it is opened; files that cannot be
    /// restored whole are named and the exit status is 3.
    Restore {
        #[command(flatten)]
        repo: RepoArgs,
        /// Snapshot id (a unique prefix) or `latest`.
        snapshot: String,
        /// Directory to restore into (entries keep their full paths below it).
        #[arg(long, value_name = "DIR")]
        target: PathBuf,
        /// Restore only paths matching this pattern and what lies below them
        /// (`*` within a name, `**` across directories, `?` one byte).
        #[arg(long, value_name = "PATTERN")]
        include: Option<String>,
    },
    /// Write one file of a snapshot to stdout.
    Dump {
        #[command(flatten)]
        repo: RepoArgs,
        /// Snapshot id (a unique prefix) or `latest`.
        snapshot: String,
        /// The file's path as `ls` shows it.
        path: String,
    },
    /// Bytes shared and added between two snapshots, and the paths that differ.
    Diff {
        #[command(flatten)]
        repo: RepoArgs,
        /// The older snapshot.
        a: String,
        /// The newer snapshot.
        b: String,
    },
    /// Check the repository; exit 3 if anything is damaged.
    Check {
        #[command(flatten)]
        repo: RepoArgs,
        /// Also read every pack, open every chunk and check its id.
        #[arg(long)]
        read_data: bool,
    },
    /// Remove the snapshots no --keep rule keeps, per host and path set
    /// (as restic does; their data stays until `prune`). Days, weeks
    /// (ISO) and months are taken in UTC.
    Forget {
        #[command(flatten)]
        repo: RepoArgs,
        /// Keep the newest N snapshots.
        #[arg(long, value_name = "N", default_value_t = 0)]
        keep_last: usize,
        /// Keep the newest snapshot of each of the last N days that have one.
        #[arg(long, value_name = "N", default_value_t = 0)]
        keep_daily: usize,
        /// Keep the newest snapshot of each of the last N weeks that have one.
        #[arg(long, value_name = "N", default_value_t = 0)]
        keep_weekly: usize,
        /// Keep the newest snapshot of each of the last N months that have one.
        #[arg(long, value_name = "N", default_value_t = 0)]
        keep_monthly: usize,
        /// Keep every snapshot less than DURATION older than the newest
        /// (e.g. 1y6m, 14d, 36h: years, months, days, hours).
        #[arg(long, value_name = "DURATION")]
        keep_within: Option<String>,
        /// Say what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete data no snapshot uses (waits for no one: fails while a backup
    /// holds the repository).
    Prune {
        #[command(flatten)]
        repo: RepoArgs,
    },
    /// Sizes: snapshots, logical bytes, unique bytes, stored bytes.
    Stats {
        #[command(flatten)]
        repo: RepoArgs,
    },
    /// Copy snapshots from one repository to another (directory or s3://,
    /// either way): every chunk is read and checked in the source, and only
    /// chunks the destination lacks are written to it. Snapshots already in
    /// the destination (same time, host and paths) are skipped.
    ///
    /// The key options (--key-file, …) name the destination's key, and the
    /// source's too unless it has its own: --from-key-file,
    /// --from-passphrase-env, or a source directory's `<DIR>.key`. --s3-*
    /// apply to both.
    Copy {
        /// Source repository (DIR or s3://BUCKET/PREFIX).
        #[arg(long, value_name = "REPO")]
        from: PathBuf,
        /// Destination repository (DIR or s3://BUCKET/PREFIX); it must exist
        /// (`gvault repo init`).
        #[arg(long, value_name = "REPO")]
        to: PathBuf,
        /// The source repository's key file.
        #[arg(long, value_name = "FILE", conflicts_with = "from_passphrase_env")]
        from_key_file: Option<PathBuf>,
        /// The environment variable holding the source's passphrase.
        #[arg(long, value_name = "VAR")]
        from_passphrase_env: Option<String>,
        /// Snapshots to copy (ids, unique prefixes, or `latest`); all if none.
        snapshots: Vec<String>,
        /// Print one JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        keys: KeyArgs,
        #[command(flatten)]
        s3: S3Args,
    },
}

/// Runs one command; returns the process exit code.
pub fn run(cmd: RepoCommand) -> i32 {
    match execute(cmd) {
        Ok(code) => code,
        Err(e) if crate::output::is_broken_pipe(&*e) => crate::output::EXIT_BROKEN_PIPE,
        Err(e) => {
            eprintln!("gvault: {e}");
            EXIT_ERROR
        }
    }
}

fn print_json(v: &Value) -> Result<(), Box<dyn std::error::Error>> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    out.write_all(b"\n")?;
    Ok(())
}

pub(crate) fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn time_str(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    // SAFETY: gmtime_r writes into tm only.
    if unsafe { libc::gmtime_r(&t, &mut tm) }.is_null() {
        return secs.to_string();
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn execute(cmd: RepoCommand) -> CmdResult {
    match cmd {
        RepoCommand::Init {
            repo,
            kdf,
            chunker,
            min_size,
            avg_size,
            max_size,
            block_size,
            no_compression,
        } => init(
            &repo,
            &kdf,
            chunker,
            (min_size, avg_size, max_size),
            block_size,
            !no_compression,
        ),
        RepoCommand::Backup { repo, paths, stdin } => backup(&repo, &paths, stdin.as_deref()),
        RepoCommand::Copy {
            from,
            to,
            from_key_file,
            from_passphrase_env,
            snapshots,
            json,
            keys,
            s3,
        } => copy(
            &from,
            &to,
            from_key_file.as_deref(),
            from_passphrase_env.as_deref(),
            &snapshots,
            json,
            &keys,
            &s3,
        ),
        RepoCommand::Snapshots { repo } => {
            let r = repo.open()?;
            let list = gvault_cas::snapshot::list(&r)?;
            if repo.json {
                let v: Vec<Value> = list
                    .iter()
                    .map(|(n, s)| {
                        json!({
                            "id": n,
                            "time_ns": s.time_ns,
                            "hostname": lossy(&s.hostname),
                            "paths": s.paths.iter().map(|p| format!("/{}", lossy(p))).collect::<Vec<_>>(),
                            "parent": s.parent.map(hex::encode),
                            "entries": s.entries.len(),
                            "bytes": s.entries.iter().map(|e| e.size).sum::<u64>(),
                        })
                    })
                    .collect();
                print_json(&json!({ "snapshots": v }))?;
            } else {
                for (n, s) in &list {
                    let paths: Vec<String> =
                        s.paths.iter().map(|p| format!("/{}", lossy(p))).collect();
                    println!(
                        "{}  {}  {}  {:>10}  {}",
                        &n[..16],
                        time_str(s.time_ns),
                        lossy(&s.hostname),
                        human(s.entries.iter().map(|e| e.size).sum()),
                        paths.join(" ")
                    );
                }
            }
            Ok(0)
        }
        RepoCommand::Ls { repo, snapshot } => {
            let r = repo.open()?;
            let name = gvault_cas::snapshot::resolve(&r, &snapshot)?;
            let s = gvault_cas::Snapshot::read(&r, &name)?;
            if repo.json {
                let v: Vec<Value> = s
                    .entries
                    .iter()
                    .map(|e| {
                        json!({
                            "path": format!("/{}", lossy(&e.path)),
                            "kind": kind_name(e.kind),
                            "mode": format!("{:o}", e.mode),
                            "uid": e.uid, "gid": e.gid,
                            "mtime_ns": e.mtime_ns,
                            "size": e.size,
                            "chunks": e.chunks.len(),
                            "target": (e.kind == gvault_cas::EntryKind::Symlink).then(|| lossy(&e.target)),
                        })
                    })
                    .collect();
                print_json(&json!({ "snapshot": name, "entries": v }))?;
            } else {
                for e in &s.entries {
                    let extra = match e.kind {
                        gvault_cas::EntryKind::Symlink => format!(" -> {}", lossy(&e.target)),
                        gvault_cas::EntryKind::HardLink => s
                            .entries
                            .get(e.link as usize)
                            .map(|t| format!(" => /{}", lossy(&t.path)))
                            .unwrap_or_default(),
                        _ => String::new(),
                    };
                    println!(
                        "{:<8} {:>7o} {:>12} /{}{}",
                        kind_name(e.kind),
                        e.mode & 0o7777,
                        e.size,
                        lossy(&e.path),
                        extra
                    );
                }
            }
            Ok(0)
        }
        RepoCommand::Restore {
            repo,
            snapshot,
            target,
            include,
        } => {
            let r = repo.open()?;
            let name = gvault_cas::snapshot::resolve(&r, &snapshot)?;
            let s = gvault_cas::Snapshot::read(&r, &name)?;
            let pat = include.as_deref().map(gvault_cas::Pattern::new);
            let total: u64 = s
                .entries
                .iter()
                .filter(|e| pat.as_ref().is_none_or(|p| p.matches(&e.path)))
                .map(|e| e.size)
                .sum();
            let pb = crate::progress::bytes("restoring", Some(total));
            let sum =
                gvault_cas::restore(&r, &s, &target, pat.as_ref(), &|_, b| pb.set_position(b))?;
            pb.finish_and_clear();
            for (p, why) in &sum.failed {
                eprintln!("gvault: not restored: {p}: {why}");
            }
            if repo.json {
                print_json(&json!({
                    "snapshot": name, "files": sum.files, "dirs": sum.dirs, "links": sum.links,
                    "bytes": sum.bytes,
                    "failed": sum.failed.iter().map(|(p, w)| json!({"path": p, "error": w})).collect::<Vec<_>>(),
                }))?;
            } else {
                println!(
                    "restored {} files, {} directories, {} links, {} into {}{}",
                    sum.files,
                    sum.dirs,
                    sum.links,
                    human(sum.bytes),
                    target.display(),
                    if sum.failed.is_empty() {
                        String::new()
                    } else {
                        format!("; {} could not be restored", sum.failed.len())
                    }
                );
            }
            Ok(if sum.failed.is_empty() {
                0
            } else {
                EXIT_INCOMPLETE
            })
        }
        RepoCommand::Dump {
            repo,
            snapshot,
            path,
        } => {
            let r = repo.open()?;
            let name = gvault_cas::snapshot::resolve(&r, &snapshot)?;
            let s = gvault_cas::Snapshot::read(&r, &name)?;
            let mut out = std::io::stdout().lock();
            gvault_cas::dump(&r, &s, &path, &mut out)?;
            Ok(0)
        }
        RepoCommand::Diff { repo, a, b } => {
            let r = repo.open()?;
            let (na, nb) = (
                gvault_cas::snapshot::resolve(&r, &a)?,
                gvault_cas::snapshot::resolve(&r, &b)?,
            );
            let d = gvault_cas::diff(
                &gvault_cas::Snapshot::read(&r, &na)?,
                &gvault_cas::Snapshot::read(&r, &nb)?,
            );
            if repo.json {
                print_json(&json!({
                    "a": na, "b": nb, "bytes_a": d.bytes_a, "bytes_b": d.bytes_b,
                    "bytes_shared": d.bytes_shared, "bytes_added": d.bytes_added, "bytes_removed": d.bytes_removed,
                    "added": d.added, "removed": d.removed, "changed": d.changed,
                }))?;
            } else {
                for p in &d.added {
                    println!("+ /{p}");
                }
                for p in &d.removed {
                    println!("- /{p}");
                }
                for p in &d.changed {
                    println!("M /{p}");
                }
                println!(
                    "shared {} of {} ({:.1}%), added {}, removed {}",
                    human(d.bytes_shared),
                    human(d.bytes_shared + d.bytes_added),
                    100.0 * d.bytes_shared as f64
                        / ((d.bytes_shared + d.bytes_added).max(1)) as f64,
                    human(d.bytes_added),
                    human(d.bytes_removed)
                );
            }
            Ok(0)
        }
        RepoCommand::Check { repo, read_data } => {
            let r = repo.open_uncached()?;
            let pb = crate::progress::bytes("reading packs", None);
            let c = gvault_cas::check(&r, read_data, &mut |done, _| pb.set_position(done))?;
            pb.finish_and_clear();
            if repo.json {
                print_json(&json!({
                    "clean": c.is_clean(), "snapshots": c.snapshots, "index_files": c.index_files,
                    "packs": c.packs, "chunks_read": c.chunks_read, "errors": c.errors,
                    "affected": c.affected.iter().map(|(s, p)| json!({"snapshot": s, "path": format!("/{p}")})).collect::<Vec<_>>(),
                    "unindexed_packs": c.unindexed_packs,
                }))?;
            } else {
                for e in &c.errors {
                    eprintln!("gvault: {e}");
                }
                println!(
                    "{} snapshots, {} index files, {} packs{}: {}",
                    c.snapshots,
                    c.index_files,
                    c.packs,
                    if read_data {
                        format!(", {} chunks read and verified", c.chunks_read)
                    } else {
                        String::new()
                    },
                    if c.is_clean() {
                        "no damage found".to_string()
                    } else {
                        format!(
                            "{} problems, {} snapshot files affected",
                            c.errors.len(),
                            c.affected.len()
                        )
                    }
                );
                if !c.unindexed_packs.is_empty() {
                    println!("{} packs no index names (an interrupted backup; the next backup reuses them, prune removes them)", c.unindexed_packs.len());
                }
            }
            Ok(if c.is_clean() { 0 } else { EXIT_INCOMPLETE })
        }
        RepoCommand::Forget {
            repo,
            keep_last,
            keep_daily,
            keep_weekly,
            keep_monthly,
            keep_within,
            dry_run,
        } => {
            let within = keep_within
                .as_deref()
                .map(str::parse::<gvault_cas::Span>)
                .transpose()?;
            let policy = gvault_cas::Policy {
                last: keep_last,
                daily: keep_daily,
                weekly: keep_weekly,
                monthly: keep_monthly,
                within,
            };
            let r = repo.open()?;
            let rep = gvault_cas::forget_with(&r, &policy, dry_run)?;
            if repo.json {
                let snaps: Vec<Value> = rep
                    .decisions
                    .iter()
                    .map(|d| {
                        json!({
                            "snapshot": d.snapshot, "time_ns": d.time_ns,
                            "hostname": d.hostname, "keep": d.reasons,
                        })
                    })
                    .collect();
                print_json(&json!({
                    "removed": rep.removed, "dry_run": dry_run, "snapshots": snaps,
                }))?;
            } else {
                for d in &rep.decisions {
                    let what = if d.reasons.is_empty() {
                        "remove".to_string()
                    } else {
                        format!("keep ({})", d.reasons.join(", "))
                    };
                    println!(
                        "{}  {}  {}  {what}",
                        &d.snapshot[..8.min(d.snapshot.len())],
                        time_str(d.time_ns),
                        d.hostname
                    );
                }
                if dry_run {
                    println!("would remove {} snapshots (dry run)", rep.removed.len());
                } else {
                    println!(
                        "removed {} snapshots (run `gvault repo prune` to free their data)",
                        rep.removed.len()
                    );
                }
            }
            Ok(0)
        }
        RepoCommand::Prune { repo } => {
            let r = repo.open()?;
            let pb = crate::progress::spinner("pruning");
            let p = gvault_cas::prune(&r)?;
            pb.finish_and_clear();
            if repo.json {
                print_json(&json!({
                    "packs_deleted": p.packs_deleted, "packs_rewritten": p.packs_rewritten,
                    "packs_written": p.packs_written, "chunks_removed": p.chunks_removed,
                    "bytes_freed": p.bytes_freed, "index_files_replaced": p.index_files_replaced,
                }))?;
            } else {
                println!(
                    "removed {} chunks: {} packs deleted ({} rewritten into {}), {} freed",
                    p.chunks_removed,
                    p.packs_deleted,
                    p.packs_rewritten,
                    p.packs_written,
                    human(p.bytes_freed)
                );
            }
            Ok(0)
        }
        RepoCommand::Stats { repo } => {
            let r = repo.open()?;
            let s = gvault_cas::stats(&r)?;
            if repo.json {
                print_json(&json!({
                    "snapshots": s.snapshots, "files": s.files, "logical_bytes": s.logical_bytes,
                    "chunks": s.chunks, "unique_bytes": s.unique_bytes, "packs": s.packs,
                    "index_files": s.index_files, "stored_bytes": s.stored_bytes,
                }))?;
            } else {
                println!("snapshots      {}", s.snapshots);
                println!("files          {}", s.files);
                println!("logical bytes  {}", human(s.logical_bytes));
                println!(
                    "unique bytes   {} in {} chunks",
                    human(s.unique_bytes),
                    s.chunks
                );
                println!(
                    "stored bytes   {} in {} packs, {} index files",
                    human(s.stored_bytes),
                    s.packs,
                    s.index_files
                );
                println!(
                    "dedup ratio    {:.2}x",
                    s.logical_bytes as f64 / s.unique_bytes.max(1) as f64
                );
            }
            Ok(0)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn copy(
    from: &Path,
    to: &Path,
    from_key_file: Option<&Path>,
    from_passphrase_env: Option<&str>,
    wanted: &[String],
    json: bool,
    keys: &KeyArgs,
    s3: &S3Args,
) -> CmdResult {
    let (src_loc, dst_loc) = (Location::parse(from)?, Location::parse(to)?);
    if src_loc.text() == dst_loc.text() {
        return Err("--from and --to name the same repository".into());
    }
    let accel = keys.backend()?.unwrap_or_else(accel_jobs::cpu_backend);
    let src_enc = match (from_key_file, from_passphrase_env) {
        (Some(f), _) => Some(gvault_store::Encryption::with_key(
            gvault_store::keys::read_key_file(f)?,
        )),
        (None, Some(var)) => {
            let p = std::env::var(var)
                .ok()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| format!("--from-passphrase-env: ${var} is not set or empty"))?;
            Some(gvault_store::Encryption::with_passphrase(p))
        }
        // A source directory's own `<DIR>.key` first, else the shared key.
        (None, None) => match &src_loc {
            Location::Dir(d) if keys::default_key_file(d).is_ok_and(|f| f.exists()) => None,
            _ => keys.encryption()?,
        },
    };
    let src = open_with(&src_loc, src_enc, s3, accel.clone())?;
    let dst = open_at(&dst_loc, keys, s3, accel)?;
    let all = gvault_cas::snapshot::list(&src)?;
    let chosen: Vec<String> = if wanted.is_empty() {
        all.iter().map(|(n, _)| n.clone()).collect()
    } else {
        wanted
            .iter()
            .map(|w| gvault_cas::snapshot::resolve(&src, w))
            .collect::<Result<_, _>>()?
    };
    let present: Vec<gvault_cas::Snapshot> = gvault_cas::snapshot::list(&dst)?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let mut copied = Vec::new();
    let mut skipped = Vec::new();
    for name in chosen {
        let snap = match all.iter().find(|(n, _)| *n == name) {
            Some((_, s)) => s.clone(),
            None => gvault_cas::Snapshot::read(&src, &name)?,
        };
        if present.iter().any(|p| {
            p.time_ns == snap.time_ns && p.hostname == snap.hostname && p.paths == snap.paths
        }) {
            skipped.push(name);
            continue;
        }
        let pb = crate::progress::spinner(&format!("copying snapshot {}", &name[..16]));
        let sum = gvault_cas::copy_snapshot(&src, &dst, &snap)?;
        pb.finish_and_clear();
        if !json {
            println!(
                "snapshot {} copied as {}: {} chunks written, {} already there; added {}",
                &name[..16],
                &sum.snapshot[..16],
                sum.chunks_new,
                sum.chunks_known,
                human(sum.bytes_added)
            );
        }
        copied.push(json!({
            "from": name, "to": sum.snapshot, "chunks_new": sum.chunks_new,
            "chunks_known": sum.chunks_known, "bytes_read": sum.bytes_read,
            "bytes_added": sum.bytes_added, "packs_written": sum.packs_written,
        }));
    }
    if json {
        print_json(&json!({ "copied": copied, "skipped": skipped }))?;
    } else if !skipped.is_empty() {
        println!(
            "{} snapshots already in {} were skipped",
            skipped.len(),
            dst_loc.text()
        );
    }
    Ok(0)
}

fn kind_name(k: gvault_cas::EntryKind) -> &'static str {
    match k {
        gvault_cas::EntryKind::Dir => "dir",
        gvault_cas::EntryKind::File => "file",
        gvault_cas::EntryKind::Symlink => "symlink",
        gvault_cas::EntryKind::HardLink => "hardlink",
    }
}

fn init(
    repo: &RepoArgs,
    kdf: &KdfArgs,
    kind: ChunkerKind,
    cdc: (u32, u32, u32),
    block: u32,
    compression: bool,
) -> CmdResult {
    let loc = repo.location()?;
    let chunker = match kind {
        ChunkerKind::Cdc => Chunker::Cdc {
            min: cdc.0,
            avg: cdc.1,
            max: cdc.2,
        },
        ChunkerKind::Fixed => Chunker::Fixed { size: block },
    };
    chunker.validate()?;
    let opts = InitOptions {
        chunker,
        compression,
    };
    let made = match &loc {
        Location::Dir(dir) => {
            let (enc, what, created) = keys::init_key(dir, &repo.keys, kdf)?;
            (
                Repository::init(dir, &enc, opts, repo.accel()?),
                what,
                created,
            )
        }
        Location::S3(url) => {
            if repo.keys.source_name().is_none() {
                return Err(format!(
                    "{url}: an S3 repository keeps no key file beside it; pass --key-file FILE (created if missing; keep it safe), --passphrase-env VAR, or set GVAULT_KEY_FILE, GVAULT_KEY or GVAULT_PASSPHRASE"
                )
                .into());
            }
            // Connect first: a bad endpoint or bucket creates no key file.
            let backend = Arc::new(S3Backend::connect(url, &repo.s3.options())?);
            let (enc, what, created) = keys::init_key(Path::new(url), &repo.keys, kdf)?;
            let r = Repository::init_on(backend, url, &enc, opts, repo.accel()?);
            (r, what, created)
        }
    };
    let (made, what, created) = made;
    match made {
        Ok(r) => {
            if repo.json {
                print_json(
                    &json!({ "repo": loc.text(), "id": hex::encode(r.config.repo_id), "key": what }),
                )?;
            } else {
                println!(
                    "created repository {} ({}), key: {what}",
                    loc.text(),
                    chunker_text(&chunker)
                );
            }
            Ok(0)
        }
        Err(e) => {
            if let Some(f) = created {
                let _ = std::fs::remove_file(f);
            }
            Err(e.into())
        }
    }
}

fn chunker_text(c: &Chunker) -> String {
    match c {
        Chunker::Cdc { min, avg, max } => format!(
            "FastCDC {} / {} / {}",
            human(*min as u64),
            human(*avg as u64),
            human(*max as u64)
        ),
        Chunker::Fixed { size } => format!("fixed {} blocks", human(*size as u64)),
    }
}

fn backup(repo: &RepoArgs, paths: &[PathBuf], stdin: Option<&str>) -> CmdResult {
    let r = repo.open()?;
    let start = std::time::Instant::now();
    let pb = crate::progress::bytes("backing up", None);
    // The tree's size, found beside the backup, gives the bar a total;
    // files unchanged since the parent count as done when they are passed.
    let _walk = match stdin {
        Some(_) => None,
        None => Some(crate::progress::total_of_tree(&pb, paths)),
    };
    let mut report = |p: gvault_cas::Progress| {
        pb.set_position(p.bytes + p.bytes_unchanged);
        pb.set_message(format!("backing up: {} files", p.files));
    };
    let sum = match stdin {
        Some(name) => {
            gvault_cas::backup_reader(&r, name, &mut std::io::stdin().lock(), &mut report)?
        }
        None => gvault_cas::backup(&r, paths, &mut report)?,
    };
    pb.finish_and_clear();
    for w in &sum.warnings {
        eprintln!("gvault: warning: {w}");
    }
    let secs = start.elapsed().as_secs_f64();
    if repo.json {
        print_json(&json!({
            "snapshot": sum.snapshot, "parent": sum.parent,
            "files_new": sum.files_new, "files_changed": sum.files_changed, "files_unchanged": sum.files_unchanged,
            "dirs": sum.dirs, "bytes_total": sum.bytes_total, "bytes_read": sum.bytes_read,
            "chunks_new": sum.chunks_new, "chunks_known": sum.chunks_known,
            "bytes_new_raw": sum.bytes_new_raw, "bytes_added": sum.bytes_added,
            "packs_written": sum.packs_written, "packs_adopted": sum.packs_adopted,
            "warnings": sum.warnings, "seconds": secs,
        }))?;
    } else {
        println!(
            "snapshot {} saved: {} new, {} changed, {} unchanged files, {} dirs; read {} of {} in {:.2}s ({}/s); added {} ({} new before compression)",
            &sum.snapshot[..16],
            sum.files_new,
            sum.files_changed,
            sum.files_unchanged,
            sum.dirs,
            human(sum.bytes_read),
            human(sum.bytes_total),
            secs,
            human((sum.bytes_read as f64 / secs.max(1e-9)) as u64),
            human(sum.bytes_added),
            human(sum.bytes_new_raw)
        );
    }
    Ok(
        if sum
            .warnings
            .iter()
            .any(|w| w.ends_with("skipped") || w.contains("not backed up"))
        {
            EXIT_INCOMPLETE
        } else {
            0
        },
    )
}
