//! A repository on S3-compatible object storage (AWS S3, MinIO, Ceph RGW,
//! SeaweedFS, R2, GCS's S3 API): `s3://bucket/prefix`, one object per
//! repository file, under the same names as in a local directory
//! (`<prefix>/config`, `<prefix>/keys/KEYS`, `<prefix>/data/<id>`, …).
//!
//! Built on `object_store` (the Apache Arrow project's client, used by
//! DataFusion, Polars and delta-rs) rather than opendal or the AWS SDK: it
//! is one small, well-kept crate that already does what a backup tool needs
//! from S3 — SigV4 signing, retries of 5xx/throttling/timeouts with
//! exponential backoff and jitter under a total time bound, multipart
//! uploads, paginated listings, path-style addressing for self-hosted
//! servers, TLS by rustls (plain HTTP only when allowed) — and it is
//! configured from the same `AWS_*` variables as the AWS tools.
//!
//! The crate is async; the [`Backend`] trait is not. The backend owns a
//! small tokio runtime and blocks on it; the repository's threads (pack
//! writers, restore workers) each block on their own request, and a
//! [`LimitStore`] bounds the requests in flight to `connections`.
//!
//! Every object is written whole: a PUT (or a multipart upload, for
//! objects above `multipart_threshold`) makes the object visible only when
//! it is complete, so a killed backup never leaves half an object behind —
//! at most whole packs that no index names yet, which the next backup
//! adopts. Retrying a PUT is safe because objects are immutable and named
//! by random ids (locks, the only objects rewritten, are rewritten whole).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::limit::LimitStore;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
    WriteMultipart,
};

use crate::backend::{Backend, Kind};
use crate::error::{Error, Result};

/// How the backend talks to the server.
#[derive(Clone, Debug)]
pub struct S3Options {
    /// The server's URL (`https://…`, or `http://…` for a local server);
    /// `None`: `AWS_ENDPOINT_URL`, else AWS itself.
    pub endpoint: Option<String>,
    /// Credentials and region; `None`: the `AWS_*` environment.
    pub credentials: Option<S3Credentials>,
    pub region: Option<String>,
    /// Requests in flight at most (uploads, downloads, listings).
    pub connections: usize,
    /// One request's time limit (a whole part or object must arrive in it).
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries of one request (5xx, 429, timeouts, dropped connections),
    /// at most; `retry_timeout` usually ends them first.
    pub max_retries: usize,
    /// No retry starts after this long since the first attempt.
    pub retry_timeout: Duration,
    /// Objects at least this big go up as multipart uploads.
    pub multipart_threshold: usize,
    /// The part size of multipart uploads (S3's minimum is 5 MiB).
    pub part_size: usize,
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            endpoint: None,
            credentials: None,
            region: None,
            connections: 8,
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            max_retries: 100,
            retry_timeout: Duration::from_secs(180),
            multipart_threshold: 32 << 20,
            part_size: 8 << 20,
        }
    }
}

/// Static credentials (an access key, and a session token for temporary ones).
#[derive(Clone)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Credentials({}, secret hidden)", self.access_key_id)
    }
}

/// `s3://bucket/prefix` split into the bucket and the prefix (no slashes
/// at either end; empty for the bucket's root).
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let bad = |why: &str| {
        Error::InvalidArgument(format!(
            "{url:?} is not an S3 repository URL ({why}); expected s3://BUCKET[/PREFIX]"
        ))
    };
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad("it does not start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.']);
    if !bucket_ok {
        return Err(bad(
            "a bucket name is 3 to 63 lowercase letters, digits, '-' and '.'",
        ));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|s| s == "." || s == "..")
        || prefix.contains("//")
        || prefix.chars().any(|c| c.is_control())
    {
        return Err(bad("the prefix has an empty, '.' or '..' segment"));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

/// A repository in a bucket, under a prefix.
pub struct S3Backend {
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    bucket: String,
    prefix: String,
    endpoint: String,
    opts: S3Options,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Backend({} at {})", self.url(), self.endpoint)
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl S3Backend {
    /// Connects to `s3://bucket/prefix` with credentials and region from
    /// the environment as the AWS tools take them (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, or a web identity / container role), and checks
    /// that the bucket answers with these credentials (one listing).
    pub fn connect(url: &str, opts: &S3Options) -> Result<S3Backend> {
        let (bucket, prefix) = parse_s3_url(url)?;
        if opts.connections == 0 || opts.connections > 1024 {
            return Err(Error::InvalidArgument(format!(
                "S3 connections must be 1..=1024, not {}",
                opts.connections
            )));
        }
        if opts.part_size < 5 << 20 || opts.multipart_threshold < opts.part_size {
            return Err(Error::InvalidArgument(
                "S3 multipart parts must be at least 5 MiB and the threshold at least one part"
                    .into(),
            ));
        }
        let endpoint = opts.endpoint.clone().or_else(|| env("AWS_ENDPOINT_URL"));
        let mut b = AmazonS3Builder::from_env().with_bucket_name(&bucket);
        if let Some(r) = opts.region.clone().or_else(|| {
            env("AWS_REGION")
                .is_none()
                .then(|| env("AWS_DEFAULT_REGION"))
                .flatten()
        }) {
            b = b.with_region(r);
        }
        if let Some(c) = &opts.credentials {
            b = b
                .with_access_key_id(&c.access_key_id)
                .with_secret_access_key(&c.secret_access_key);
            if let Some(t) = &c.session_token {
                b = b.with_token(t);
            }
        }
        let mut client = ClientOptions::new()
            .with_timeout(opts.request_timeout)
            .with_connect_timeout(opts.connect_timeout)
            .with_pool_max_idle_per_host(opts.connections);
        let shown = match &endpoint {
            Some(e) => {
                let plain = if let Some(rest) = e.strip_prefix("http://") {
                    !rest.is_empty()
                } else if e.starts_with("https://") {
                    false
                } else {
                    return Err(Error::InvalidArgument(format!(
                        "S3 endpoint {e:?} must start with https:// (or http:// for a server without TLS)"
                    )));
                };
                // Self-hosted servers address buckets by path, and speak
                // plain HTTP only when their URL says so.
                client = client.with_allow_http(plain);
                b = b
                    .with_endpoint(e.trim_end_matches('/'))
                    .with_virtual_hosted_style_request(false);
                if opts.credentials.is_none()
                    && env("AWS_ACCESS_KEY_ID").is_none()
                    && env("AWS_WEB_IDENTITY_TOKEN_FILE").is_none()
                    && env("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_none()
                    && env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_none()
                {
                    return Err(Error::InvalidArgument(format!(
                        "no S3 credentials for {e}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)"
                    )));
                }
                e.clone()
            }
            None => {
                client = client.with_allow_http(false);
                "AWS S3".to_string()
            }
        };
        let store = b
            .with_client_options(client)
            .with_retry(RetryConfig {
                // Waits grow about 1.5× per retry from 0.2 s on average
                // (decorrelated jitter: some stay short, so 20 retries
                // may pass in 15 s); `retry_timeout` is what bounds the
                // whole, and `max_retries` only backs it up.
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(200),
                    max_backoff: Duration::from_secs(15),
                    base: 3.0,
                },
                max_retries: opts.max_retries,
                retry_timeout: opts.retry_timeout,
            })
            .build()
            .map_err(|e| Error::InvalidArgument(format!("S3 configuration for {url}: {e}")))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gvault-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::Io {
                context: "starting the S3 client's runtime".into(),
                source: e,
            })?;
        let s3 = S3Backend {
            store: Arc::new(LimitStore::new(store, opts.connections)),
            rt,
            bucket,
            prefix,
            endpoint: shown,
            opts: opts.clone(),
        };
        s3.probe()?;
        Ok(s3)
    }

    /// `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    pub fn options(&self) -> &S3Options {
        &self.opts
    }

    /// Deletes a root object (`config`, `keys/KEYS`): for removing a whole
    /// scratch repository (benchmarks); a missing object is no error.
    pub fn delete_root(&self, name: &str) -> Result<()> {
        valid_root(name)?;
        let p = self.full(name)?;
        match self.rt.block_on(self.store.delete(&p)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("deleting", &p, e)),
        }
    }

    /// One listing of the prefix: fails clearly when the bucket is missing
    /// or the credentials are refused, before any repository object is read.
    fn probe(&self) -> Result<()> {
        let p = self.dir_path("");
        self.rt
            .block_on(self.store.list_with_delimiter(Some(&p)))
            .map(|_| ())
            .map_err(|e| self.err("listing", &p, e))
    }

    fn full(&self, rel: &str) -> Result<Path> {
        let s = if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.prefix)
        };
        Path::parse(&s).map_err(|e| Error::InvalidArgument(format!("object name {s:?}: {e}")))
    }

    fn dir_path(&self, dir: &str) -> Path {
        let s = match (self.prefix.is_empty(), dir.is_empty()) {
            (true, _) => dir.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{dir}", self.prefix),
        };
        Path::from(s)
    }

    fn object(&self, kind: Kind, name: &str) -> Result<Path> {
        valid_segment(name)?;
        self.full(&format!("{}/{name}", kind.dir()))
    }

    /// Turns a client error into the repository's: a missing object is an
    /// I/O `NotFound` (as a missing file of a local repository), refused
    /// credentials and a missing bucket say so plainly.
    fn err(&self, op: &str, path: &Path, e: object_store::Error) -> Error {
        let text = e.to_string();
        let code = s3_code(&text);
        let url = format!("s3://{}/{}", self.bucket, path);
        let (kind, msg) = match (&e, code.as_deref()) {
            (_, Some("NoSuchBucket")) => (
                std::io::ErrorKind::NotFound,
                format!(
                    "bucket {:?} does not exist on {} (create it first; gvault does not create buckets)",
                    self.bucket, self.endpoint
                ),
            ),
            (
                _,
                Some(c @ ("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AccessDenied"
                | "ExpiredToken" | "InvalidToken")),
            ) => (
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} refused the credentials ({c}): check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN",
                    self.endpoint
                ),
            ),
            (object_store::Error::NotFound { .. }, _) => {
                (std::io::ErrorKind::NotFound, "no such object".to_string())
            }
            (
                object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. },
                _,
            ) => (
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} refused the request (check the credentials and the bucket's policy): {text}",
                    self.endpoint
                ),
            ),
            _ => (std::io::ErrorKind::Other, text),
        };
        Error::Io {
            context: format!("{op} {url}"),
            source: std::io::Error::new(kind, msg),
        }
    }

    fn put_path(&self, path: &Path, data: &[u8]) -> Result<()> {
        let r = if data.len() >= self.opts.multipart_threshold {
            self.rt.block_on(async {
                let upload = self.store.put_multipart(path).await?;
                let mut w = WriteMultipart::new_with_chunk_size(upload, self.opts.part_size);
                for part in data.chunks(self.opts.part_size) {
                    w.wait_for_capacity(self.opts.connections).await?;
                    w.write(part);
                }
                // An unfinished upload is never visible; `finish` aborts it
                // on failure so that the server drops its parts.
                w.finish().await.map(|_| ())
            })
        } else {
            self.rt
                .block_on(self.store.put(path, PutPayload::from(data.to_vec())))
                .map(|_| ())
        };
        r.map_err(|e| self.err("writing", path, e))
    }

    fn get_path(&self, path: &Path) -> Result<Vec<u8>> {
        self.rt
            .block_on(async { self.store.get(path).await?.bytes().await })
            .map(|b| b.to_vec())
            .map_err(|e| self.err("reading", path, e))
    }
}

/// The `<Code>` of an S3 error response quoted in a client error.
fn s3_code(text: &str) -> Option<String> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(text[start..start + len].to_string())
}

/// Object names are one path segment of a repository's own making.
fn valid_segment(name: &str) -> Result<()> {
    if name.is_empty()
        || name.starts_with('.')
        || name.len() > 200
        || !name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a valid object name"
        )));
    }
    Ok(())
}

/// Root objects: `config`, or `keys/KEYS` (segments of valid names).
fn valid_root(name: &str) -> Result<()> {
    name.split('/').try_for_each(valid_segment)
}

impl Backend for S3Backend {
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()> {
        self.put_path(&self.object(kind, name)?, data)
    }
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        self.get_path(&self.object(kind, name)?)
    }
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        let p = self.object(kind, name)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let range: Range<u64> = offset..offset + len as u64;
        let b = self
            .rt
            .block_on(self.store.get_range(&p, range))
            .map_err(|e| self.err(&format!("reading {len} bytes at {offset} of"), &p, e))?;
        if b.len() != len {
            return Err(Error::Io {
                context: format!(
                    "reading {len} bytes at {offset} of s3://{}/{p}",
                    self.bucket
                ),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the object is too short (got {} bytes)", b.len()),
                ),
            });
        }
        Ok(b.to_vec())
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64> {
        let p = self.object(kind, name)?;
        self.rt
            .block_on(self.store.head(&p))
            .map(|m| m.size)
            .map_err(|e| self.err("reading the size of", &p, e))
    }
    fn list(&self, kind: Kind) -> Result<Vec<String>> {
        let dir = self.dir_path(kind.dir());
        // The client follows continuation tokens: every page, not the first 1000.
        let metas: Vec<_> = self
            .rt
            .block_on(self.store.list(Some(&dir)).try_collect())
            .map_err(|e: object_store::Error| self.err("listing", &dir, e))?;
        let mut out: Vec<String> = metas
            .into_iter()
            .filter_map(|m| {
                let rest = m
                    .location
                    .as_ref()
                    .strip_prefix(dir.as_ref())?
                    .strip_prefix('/')?
                    .to_string();
                // Only this kind's own objects (not deeper names, not
                // temporary names of other tools).
                valid_segment(&rest).is_ok().then_some(rest)
            })
            .collect();
        out.sort();
        Ok(out)
    }
    fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        let p = self.object(kind, name)?;
        match self.rt.block_on(self.store.delete(&p)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("deleting", &p, e)),
        }
    }
    fn exists(&self, kind: Kind, name: &str) -> Result<bool> {
        let p = self.object(kind, name)?;
        match self.rt.block_on(self.store.head(&p)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err("looking up", &p, e)),
        }
    }
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()> {
        valid_root(name)?;
        self.put_path(&self.full(name)?, data)
    }
    fn get_root(&self, name: &str) -> Result<Vec<u8>> {
        valid_root(name)?;
        self.get_path(&self.full(name)?)
    }
    fn parallelism(&self) -> usize {
        self.opts.connections
    }
    fn location(&self) -> String {
        self.url()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_and_bad_ones_refused() {
        assert_eq!(
            parse_s3_url("s3://my-bucket/a/b/").unwrap(),
            ("my-bucket".to_string(), "a/b".to_string())
        );
        assert_eq!(
            parse_s3_url("s3://bkt").unwrap(),
            ("bkt".to_string(), String::new())
        );
        for bad in [
            "bkt/x",
            "s3://",
            "s3://B/x",
            "s3://a/x",
            "s3://bkt/a//b",
            "s3://bkt/../x",
            "s3://-bkt/x",
        ] {
            assert!(
                matches!(parse_s3_url(bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn object_names_are_checked_and_error_codes_found() {
        assert!(valid_segment("0a1b").is_ok());
        assert!(valid_root("keys/KEYS").is_ok());
        for bad in ["", ".tmp", "a/b", "a b", "..", "é"] {
            assert!(valid_segment(bad).is_err(), "{bad}");
        }
        assert!(valid_root("keys//KEYS").is_err());
        assert_eq!(
            s3_code("Server returned non-2xx status code: 404: <Error><Code>NoSuchBucket</Code></Error>")
                .as_deref(),
            Some("NoSuchBucket")
        );
        assert_eq!(s3_code("connection refused"), None);
    }
}
