# Shared set-up for run.sh, test.sh and bench.sh. Every step is idempotent: it checks before it
# installs, so a second run on a prepared machine only rebuilds what changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where cargo puts what it builds: CARGO_TARGET_DIR when set (helper-62: the parser helper was
# looked for under target/ while cargo had built it elsewhere), else the tree's target/.
BUILD_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
# PATCHDIFF_PG_BIN runs the clusters of these scripts from another copy of PostgreSQL 15's
# binaries (a private prefix with its own build of pg_patchdiff, for a benchmark or a check that
# must not share the machine's installation).
PG_BIN="${PATCHDIFF_PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_CONFIG="$PG_BIN/pg_config"
PGRX_VERSION=0.18.1
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# PostgreSQL's children fail with "cannot create /dev/null" if it is ever a regular file.
ensure_devnull() {
  [ -c /dev/null ] || { rm -f /dev/null; mknod -m 666 /dev/null c 1 3; }
}

setup_system() {
  ensure_devnull
  # postgresql-15-plproxy: the router of a sharded deployment (scripts/shards.sh).
  local pkgs=(postgresql-15 postgresql-server-dev-15 postgresql-15-plproxy libclang-dev clang pkg-config libssl-dev sudo)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  reserve_ports
  # Debian starts a default cluster on 5432; this project runs its own clusters.
  if command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q '^15 main .* online'; then
    pg_ctlcluster 15 main stop || true
  fi
}

# The project's clusters and servers listen on fixed ports in 54300-54799 (the test clusters,
# the shard clusters, the benchmarks), inside Linux's default ephemeral range (32768-60999): a
# client connection made earlier can hold one of them as its local port, and a cluster started
# or restarted later (shards.rs restarts a shard mid-run) then fails with "Address already in
# use". As root, take the range out of the ephemeral ports (explicit binds are unaffected); the
# setting lasts until reboot and changes nothing else. Without the right, nothing changes.
reserve_ports() {
  local f=/proc/sys/net/ipv4/ip_local_reserved_ports range=54300-54799
  [ -w "$f" ] || return 0
  local now
  now="$(cat "$f")"
  case ",$now," in *",$range,"*) return 0 ;; esac
  echo "${now:+$now,}$range" > "$f" 2>/dev/null || true
}

setup_pgrx() {
  if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    log "installing cargo-pgrx $PGRX_VERSION (about 8 minutes on two cores)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
  fi
  if ! grep -q "$PG_CONFIG" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    cargo pgrx init --pg15 "$PG_CONFIG"
  fi
}

# Installing writes into PostgreSQL's own folders, and so does `cargo pgrx test`: concurrent
# builds on one machine take this lock so that one never replaces the other's library mid-run.
# Not in /tmp: there any local user could hold it (a shared lock is enough) and hang every start
# of the main job, or plant a link for root to create the file through (helper-44). Root's is in
# a folder only root may enter, shared by every clone; another user's is its clone's own.
if [ "$(id -u)" = 0 ]; then
  mkdir -p /run/patchdiff && chmod 0700 /run/patchdiff
  PGRX_LOCK=/run/patchdiff/install.lock
else
  mkdir -p "$ROOT/target"
  PGRX_LOCK="$ROOT/target/.install.lock"
fi

# replace_files MODE DIR FILE...: puts each FILE into DIR with MODE, as a new file renamed over
# the old one. Neither cp nor install(1) does that: both write into the existing file, and a
# library that running backends have mapped (pg_patchdiff.so, under the embedded database or
# any other cluster) would change under them or fault (SIGBUS), and PostgreSQL would restart
# every session of that server. After a rename, running processes keep the old file and new
# ones load the new; a script is never seen half written.
replace_files() {
  local mode="$1" dir="$2" f tmp
  shift 2
  for f in "$@"; do
    tmp="$dir/.$(basename "$f").new.$$"
    install -m "$mode" "$f" "$tmp" && mv -f "$tmp" "$dir/$(basename "$f")" || { rm -f "$tmp"; return 1; }
  done
}

# Built with `cargo pgrx package` and put in place by replace_files, not `cargo pgrx install`,
# which copies over the installed library in place (see replace_files).
install_extension() {
  log "building and installing pg_patchdiff"
  local pkg="$BUILD_DIR/release/pg_patchdiff-pg15" libdir sharedir
  libdir="$("$PG_CONFIG" --pkglibdir)"
  sharedir="$("$PG_CONFIG" --sharedir)"
  (cd "$ROOT" && flock "$PGRX_LOCK" cargo pgrx package -p pg_patchdiff --pg-config "$PG_CONFIG" --out-dir "$pkg")
  (
    flock 9
    replace_files 0755 "$libdir" "$pkg$libdir/pg_patchdiff.so"
    replace_files 0644 "$sharedir/extension" "$pkg$sharedir/extension/"pg_patchdiff*
  ) 9>>"$PGRX_LOCK"
  install_upgrade_scripts
  install_parser_helper
}

# pgrx writes only the install script of the version being built. The frozen install scripts of
# released versions (sql/releases) and the upgrade scripts between versions (sql/upgrades) go
# beside it, so that `CREATE EXTENSION pg_patchdiff VERSION '0.1.0'` and
# `ALTER EXTENSION pg_patchdiff UPDATE` work. sql/releases never holds the version being built
# (tests/tests/released_scripts.rs), so nothing here replaces what pgrx just wrote.
install_upgrade_scripts() {
  local dir
  dir="$("$PG_CONFIG" --sharedir)/extension"
  log "installing pg_patchdiff's released and upgrade scripts into $dir"
  (
    flock 9
    replace_files 0644 "$dir" "$ROOT"/sql/releases/pg_patchdiff--*.sql "$ROOT"/sql/upgrades/pg_patchdiff--*.sql
  ) 9>>"$PGRX_LOCK"
}

# The Waymark parser helper: tree-sitter runs in this program, which each backend starts, never
# inside PostgreSQL itself. It lives beside the extension's library ($libdir).
install_parser_helper() {
  log "building and installing patchdiff-waymark-helper"
  (cd "$ROOT" && cargo build --locked --release -p patchdiff-waymark --bin patchdiff-waymark-helper)
  (
    flock 9
    replace_files 0755 "$("$PG_CONFIG" --pkglibdir)" "$BUILD_DIR/release/patchdiff-waymark-helper"
  ) 9>>"$PGRX_LOCK"
}

setup_all() {
  setup_system
  setup_pgrx
  install_extension
}

# A virtualenv with the pinned test clients (tests/mcp_sdk/requirements.txt), from PyPI.
PY_ENV="$ROOT/target/py"
setup_python() {
  local req="$ROOT/tests/mcp_sdk/requirements.txt"
  if [ ! -x "$PY_ENV/bin/python" ]; then
    python3 -m venv "$PY_ENV"
  fi
  if ! cmp -s "$req" "$PY_ENV/requirements.txt"; then
    "$PY_ENV/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$PY_ENV/requirements.txt"
  fi
}

# Node 22 and the pinned Node MCP clients (tests/mcp_node/package.json and package-lock.json:
# the Inspector CLI, the TypeScript SDK client, the conformance suite, and Node 22 itself as the
# npm package `node`), from npm, into target/node. Any npm can install them (the machine's own
# Node only runs npm); the tests run on the Node 22 that this installs.
NODE_PREFIX="$ROOT/target/node"
NODE_BIN="$NODE_PREFIX/node_modules/.bin/node"
setup_node() {
  local src="$ROOT/tests/mcp_node"
  if ! command -v npm >/dev/null; then
    log "installing npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends nodejs npm
  fi
  if ! cmp -s "$src/package-lock.json" "$NODE_PREFIX/package-lock.json" \
     || ! cmp -s "$src/package.json" "$NODE_PREFIX/package.json" \
     || ! "$NODE_BIN" --version 2>/dev/null | grep -q '^v22\.'; then
    log "installing the Node MCP clients and Node 22 (npm ci into $NODE_PREFIX)"
    mkdir -p "$NODE_PREFIX"
    cp "$src/package.json" "$src/package-lock.json" "$NODE_PREFIX/"
    # The registry is across a network: CI's run of 57e2f25 failed here once, on a clean
    # clone, where the same lock installed in 10 s by hand minutes later. Three tries, each
    # from a clean node_modules, and npm's own account of a failure shown.
    local try
    for try in 1 2 3; do
      if (cd "$NODE_PREFIX" && npm ci --no-audit --no-fund --loglevel=error); then
        break
      fi
      local npm_log
      npm_log=$(ls -t "${HOME:-/root}"/.npm/_logs/*-debug-*.log 2>/dev/null | head -n 1)
      if [ -n "$npm_log" ]; then
        log "npm ci failed (try $try of 3); from $npm_log:"
        grep -E " error | failed with | verbose stack " "$npm_log" | tail -n 15 >&2 || true
      fi
      if [ "$try" = 3 ]; then return 1; fi
      sleep $((try * 15))
    done
    "$NODE_BIN" --version | grep -q '^v22\.'
  fi
}

# start_cluster DIR PORT: a private PostgreSQL 15 cluster in DIR, owned by the unprivileged
# `postgres` user (initdb refuses root), listening on 127.0.0.1:PORT and a socket in DIR.
start_cluster() {
  local dir="$1" port="$2"
  ensure_devnull
  mkdir -p "$dir"
  chown postgres:postgres "$dir"
  chmod 700 "$dir"
  if [ ! -f "$dir/PG_VERSION" ]; then
    log "initdb $dir"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$dir" -E UTF8 --locale=C.UTF-8 -U postgres --auth=trust >/dev/null
  fi
  if ! runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
    # The server outlives this script: it must not inherit the caller's descriptors beyond
    # stdin/stdout/stderr (a `flock` lock held around this call would otherwise stay held for
    # as long as the cluster runs).
    (
      for fd in $(ls /proc/$BASHPID/fd); do
        if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
      done
      runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir" -l "$dir/server.log" -w -o \
        "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=${PATCHDIFF_FSYNC:-on}" start >/dev/null
    )
  fi
}

stop_cluster() {
  local dir="$1"
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$dir" -m fast stop >/dev/null 2>&1 || true
}

# psql against a cluster started by start_cluster.
cluster_psql() {
  local dir="$1" port="$2"; shift 2
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"
}

# (Re)creates the extension in DB on the cluster, so a rebuilt extension is the one in use, and
# updates an older one to the installed version when the installed scripts lead there.
create_database() {
  local dir="$1" port="$2" db="$3"
  cluster_psql "$dir" "$port" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 \
    || cluster_psql "$dir" "$port" -d postgres -c "CREATE DATABASE $db ENCODING 'UTF8' TEMPLATE template0"
  cluster_psql "$dir" "$port" -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_patchdiff" -c "
    DO \$\$ BEGIN
      SET LOCAL search_path = pg_catalog, pg_temp;
      IF EXISTS (SELECT FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
                   JOIN pg_extension_update_paths('pg_patchdiff'::name) p
                     ON p.source = e.extversion AND p.target = a.default_version AND p.path IS NOT NULL
                  WHERE e.extname = 'pg_patchdiff') THEN
        ALTER EXTENSION pg_patchdiff UPDATE;
      END IF;
    END \$\$"
}
