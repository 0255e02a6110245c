#!/usr/bin/env bash
# A local S3 server (SeaweedFS) for gvault's S3 tests and benchmarks.
#
#   scripts/s3-server.sh build        build `weed` if it is not cached yet
#   scripts/s3-server.sh start DIR    start a server with data and state in DIR,
#                                     print its environment (KEY=VALUE lines)
#   scripts/s3-server.sh env DIR      print the environment of a running server
#   scripts/s3-server.sh stop DIR     stop the server started in DIR (by pid)
#   scripts/s3-server.sh bin          print the path of the cached binary
#   scripts/s3-server.sh have         exit 0 if the binary is cached, else 3
#
# The binary is built once from the Go module at $SEAWEEDFS_VERSION and cached
# under ${XDG_CACHE_HOME:-~/.cache}/gvault/seaweedfs/<version>/weed (or
# $GVAULT_WEED when set). `go install` refuses the module (its go.mod has
# replace directives), so the source is copied out of the module cache and
# built with `go build ./weed`. Exit status 3 means "Go is not available and
# no binary is cached": callers report their tests as skipped.
set -euo pipefail

SEAWEEDFS_MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
CACHE_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gvault/seaweedfs/$SEAWEEDFS_VERSION
WEED=${GVAULT_WEED:-$CACHE_ROOT/weed}
BUCKET=${GVAULT_S3_BUCKET:-gvault-test}
ACCESS_KEY=${GVAULT_S3_ACCESS_KEY:-gvaulttestkey}
SECRET_KEY=${GVAULT_S3_SECRET_KEY:-gvaulttestsecret}

die() { echo "s3-server.sh: $*" >&2; exit 1; }

find_go() {
  if command -v go >/dev/null 2>&1; then command -v go
  elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go
  else return 1; fi
}

build() {
  [ -x "$WEED" ] && return 0
  local go
  go=$(find_go) || { echo "s3-server.sh: Go is not installed and $WEED is missing" >&2; exit 3; }
  mkdir -p "$CACHE_ROOT"
  # One build at a time (parallel test processes may all ask for it).
  exec 9>"$CACHE_ROOT/.build.lock"
  flock 9
  [ -x "$WEED" ] && return 0
  echo "s3-server.sh: building SeaweedFS $SEAWEEDFS_VERSION (about 12 minutes on 2 cores)" >&2
  local dir src work
  dir=$("$go" mod download -json "$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download gave no source directory"
  work=$(mktemp -d "$CACHE_ROOT/src.XXXXXX")
  src="$work/seaweedfs"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  (cd "$src" && GOFLAGS=-buildvcs=false nice "$go" build -o "$work/weed" ./weed)
  mv "$work/weed" "$WEED"
  rm -rf "$work"
  exec 9>&-
  echo "s3-server.sh: built $WEED" >&2
}

# Ten free TCP ports on 127.0.0.1 (the kernel's choice, released at once).
free_ports() {
  python3 - <<'PY'
import socket
socks = []
for _ in range(10):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

running() { [ -f "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

print_env() {
  [ -f "$1/env" ] || die "no server was started in $1"
  cat "$1/env"
}

# start DIR: a server whose data, log, pid and ports live in DIR. Started
# again on the same DIR (after `stop`, or after it was killed), it keeps its
# data and its ports, so clients configured for it reconnect.
start() {
  local dir=$1
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  running "$dir" && { print_env "$dir"; return 0; }
  build
  if [ ! -f "$dir/ports" ]; then free_ports > "$dir/ports"; fi
  local m mg v vg f fg s sg a ag
  read -r m mg v vg f fg s sg a ag < "$dir/ports"
  cat > "$dir/s3.json" <<JSON
{"identities":[{"name":"gvault","credentials":[{"accessKey":"$ACCESS_KEY","secretKey":"$SECRET_KEY"}],
  "actions":["Admin","Read","List","Tagging","Write"]}]}
JSON
  # Everything on 127.0.0.1; no telemetry, WebDAV, admin UI or table
  # catalogs; buckets are never created implicitly (a missing bucket must
  # stay an error). setsid: a test killing its process group spares it.
  setsid "$WEED" mini -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$m" -master.port.grpc="$mg" -volume.port="$v" -volume.port.grpc="$vg" \
    -filer.port="$f" -filer.port.grpc="$fg" -s3.port="$s" -s3.port.grpc="$sg" \
    -admin.port="$a" -admin.port.grpc="$ag" -admin.port.legacy=0 -admin.ui=false \
    -webdav=false -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false \
    -s3.config="$dir/s3.json" -s3.autoCreateBucket=false -bucket="$BUCKET" \
    >> "$dir/weed.log" 2>&1 < /dev/null &
  echo $! > "$dir/pid"
  # With GVAULT_S3_PARENT_PID, the server goes when that process does (a
  # test run that ends, or dies, leaves no server behind).
  if [ -n "${GVAULT_S3_PARENT_PID:-}" ]; then
    local spid parent=$GVAULT_S3_PARENT_PID
    spid=$(cat "$dir/pid")
    (while kill -0 "$parent" 2>/dev/null && kill -0 "$spid" 2>/dev/null; do sleep 1; done
     kill -TERM "$spid" 2>/dev/null || true) > /dev/null 2>&1 < /dev/null 9>&- &
  fi
  cat > "$dir/env" <<ENV
AWS_ENDPOINT_URL=http://127.0.0.1:$s
AWS_ACCESS_KEY_ID=$ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$SECRET_KEY
AWS_REGION=us-east-1
GVAULT_S3_BUCKET=$BUCKET
GVAULT_S3_PID=$(cat "$dir/pid")
GVAULT_S3_FILER=http://127.0.0.1:$f
ENV
  # Ready when the S3 port answers and the filer holds the bucket.
  local i
  for i in $(seq 1 600); do
    running "$dir" || { tail -20 "$dir/weed.log" >&2; die "the server exited (log: $dir/weed.log)"; }
    if curl -s -o /dev/null "http://127.0.0.1:$s/" &&
       [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$f/buckets/$BUCKET/")" = 200 ]; then
      print_env "$dir"
      return 0
    fi
    sleep 0.1
  done
  stop "$dir"
  die "the server did not answer within 60 s (log: $dir/weed.log)"
}

stop() {
  local dir=$1 pid i
  [ -f "$dir/pid" ] || return 0
  pid=$(cat "$dir/pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid"
}

case "${1:-}" in
  build) build ;;
  bin) build; echo "$WEED" ;;
  have) [ -x "$WEED" ] || exit 3 ;;
  start) [ -n "${2:-}" ] || die "usage: $0 start DIR"; start "$2" ;;
  env) [ -n "${2:-}" ] || die "usage: $0 env DIR"; print_env "$2" ;;
  stop) [ -n "${2:-}" ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 build|bin|start DIR|env DIR|stop DIR" ;;
esac
