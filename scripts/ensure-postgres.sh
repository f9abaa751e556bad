#!/usr/bin/env bash
# ensure-postgres.sh — find or start a PostgreSQL server for Regina.
#
# Usage:
#   scripts/ensure-postgres.sh [DBNAME]      print a working connection URL for DBNAME
#   scripts/ensure-postgres.sh --stop        stop the throwaway cluster (if running)
#   scripts/ensure-postgres.sh --drop DB...  remove what make run and make test made:
#       stop and delete the throwaway cluster (if one was ever started here),
#       then drop each DB that exists on the configured server (below), and
#       nothing else. Fails when the server was named but cannot be reached.
#
# Exactly one line goes to stdout: the URL. Everything else goes to stderr,
# prefixed "ensure-postgres: ".
#
# Order of attempts:
#   1. The configured server: $DATABASE_URL, else one built from
#      PG_HOST (127.0.0.1), PG_PORT (5432), PG_USER (postgres),
#      PG_PASSWORD (empty), PG_DB (postgres).
#      If DATABASE_URL or any PG_* variable is set, that server is the only
#      candidate: when it does not answer or refuses us, the script fails
#      (non-zero exit, the reason on stderr) instead of serving from a
#      scratch database nobody else reads.
#   2. Only when nothing was configured (the default 127.0.0.1:5432 does not
#      answer): a throwaway cluster in $REPO/.data/pg (initdb'd on first use,
#      trust auth, user postgres, listening on 127.0.0.1 only), announced on
#      stderr. Its port is 5432 if that is free, else the first free one of
#      55432..55441. As root, it runs as the "postgres" system user.
#   3. If no PostgreSQL binaries exist: apt-get install postgresql (as root,
#      or with password-less sudo), then step 2.
# DBNAME (default: the configured URL's database, else "postgres") is created
# if it does not exist.
set -euo pipefail

# All stdout of this script and its children goes to stderr; the URL is
# written to fd 3 (the real stdout) at the very end.
exec 3>&1 1>&2

log() { printf 'ensure-postgres: %s\n' "$*" >&2; }
die() {
	local line
	for line in "$@"; do log "$line"; done
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
IS_ROOT=0
[[ $(id -u) -eq 0 ]] && IS_ROOT=1
CONNECT_TIMEOUT=${PG_CONNECT_TIMEOUT:-3}
TRIED=()      # what was tried, for the final error message
LAST_ERR=""   # stderr of the last failed psql call

# ---------------------------------------------------------------- arguments
MODE=ensure
DBNAME=""
DROP_DBS=()
USAGE="usage: $0 [DBNAME] | --stop | --drop DB..."
case "${1:-}" in
-h | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 0
	;;
--stop) MODE=stop ;;
--drop)
	MODE=drop
	shift
	DROP_DBS=("$@")
	[[ ${#DROP_DBS[@]} -gt 0 ]] || die "--drop needs the names of the databases to drop ($USAGE)"
	set --
	;;
-*) die "unknown option: $1 ($USAGE)" ;;
*) DBNAME=${1:-} ;;
esac
[[ $# -le 1 ]] || die "too many arguments ($USAGE)"

# ---------------------------------------------------------------- helpers
urlencode() {
	local s=$1 out="" c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case "$c" in
		[a-zA-Z0-9._~-]) out+=$c ;;
		*) out+=$(printf '%%%02X' "'$c") ;;
		esac
	done
	printf '%s' "$out"
}

# Highest-versioned PostgreSQL bin dir containing $1, else the dir of $1 on PATH.
pg_bindir() {
	local tool=$1 d best=""
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
		[[ -x $d/$tool ]] && best=$d
	done
	if [[ -z $best ]] && command -v "$tool" >/dev/null 2>&1; then
		best=$(dirname "$(readlink -f "$(command -v "$tool")")")
	fi
	[[ -n $best ]] && printf '%s' "$best"
}

# Prefer the real binaries over Debian's pg_wrapper (a perl script, slower).
find_psql() {
	local d
	PSQL=""
	if d=$(pg_bindir psql); then
		PSQL=$d/psql
	elif command -v psql >/dev/null 2>&1; then
		PSQL=$(command -v psql)
	fi
	PG_ISREADY=""
	if d=$(pg_bindir pg_isready); then
		PG_ISREADY=$d/pg_isready
	elif command -v pg_isready >/dev/null 2>&1; then
		PG_ISREADY=$(command -v pg_isready)
	fi
	return 0
}

# try_psql URL: can we connect and run "select 1"? Sets LAST_ERR on failure.
try_psql() {
	local out
	if out=$(PGCONNECT_TIMEOUT=$CONNECT_TIMEOUT "$PSQL" -X -w -d "$1" -Atqc 'select 1' 2>&1 </dev/null) && [[ $out == 1 ]]; then
		return 0
	fi
	LAST_ERR=$(printf '%s' "$out" | head -n 3 | tr -s '\n\t' '  ')
	return 1
}

# find_admin DB...: ADMIN is the URL (url_for_db) of the first of these
# databases that accepts us; returns 1, ADMIN empty, when none does.
find_admin() {
	local db u
	ADMIN=""
	for db in "$@"; do
		u=$(url_for_db "$db")
		if try_psql "$u"; then
			ADMIN=$u
			return 0
		fi
	done
	return 1
}

# server_answers URL PORT HOST: is anything (a PostgreSQL server, or at least a
# TCP listener) there? Used to tell "nobody home" from "refused us".
server_answers() {
	local url=$1 port=$2 host=$3 rc=0
	if [[ -n $PG_ISREADY ]]; then
		PGCONNECT_TIMEOUT=$CONNECT_TIMEOUT "$PG_ISREADY" -q -t "$CONNECT_TIMEOUT" -d "$url" </dev/null >/dev/null 2>&1 || rc=$?
		[[ $rc -eq 0 || $rc -eq 1 ]]
		return
	fi
	port_in_use "$port" "$host"
}

# port_in_use PORT [HOST]: does something accept TCP connections there?
port_in_use() {
	local port=$1 host=${2:-127.0.0.1}
	[[ $host == /* || -z $host ]] && host=127.0.0.1
	host=${host#[}
	host=${host%]}
	timeout "$CONNECT_TIMEOUT" bash -c 'exec 9<>"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
}

# ------------------------------------------------------- configured URL
# Sets CFG_KIND (url|dsn), CFG_URL, CFG_DB, CFG_PORT, CFG_HOST and the pieces
# needed to rebuild the URL for another database (url_for_db).
# EXPLICIT: the user named a server (DATABASE_URL or a PG_* variable). Then
# it is the only candidate: no fallback to a throwaway cluster.
EXPLICIT=0
EXPLICIT_WHAT=""
if [[ -n ${DATABASE_URL:-} ]]; then
	EXPLICIT=1
	EXPLICIT_WHAT="DATABASE_URL"
	CFG_URL=$DATABASE_URL
else
	for v in PG_HOST PG_PORT PG_USER PG_PASSWORD PG_DB; do
		if [[ -n ${!v:-} ]]; then
			EXPLICIT=1
			EXPLICIT_WHAT+="${EXPLICIT_WHAT:+, }$v"
		fi
	done
	cfg_host=${PG_HOST:-127.0.0.1}
	[[ $cfg_host == /* ]] && cfg_host=$(urlencode "$cfg_host")
	cfg_auth=$(urlencode "${PG_USER:-postgres}")
	[[ -n ${PG_PASSWORD:-} ]] && cfg_auth+=":$(urlencode "$PG_PASSWORD")"
	CFG_URL="postgres://${cfg_auth}@${cfg_host}:${PG_PORT:-5432}/$(urlencode "${PG_DB:-postgres}")?sslmode=disable"
fi

url_re='^(postgres|postgresql)://([^/?#]*)(/([^?#]*))?(\?([^#]*))?$'
if [[ $CFG_URL =~ $url_re ]]; then
	CFG_KIND=url
	CFG_SCHEME=${BASH_REMATCH[1]}
	CFG_AUTHORITY=${BASH_REMATCH[2]}
	CFG_DB=${BASH_REMATCH[4]}
	CFG_QUERY=${BASH_REMATCH[6]}
	hostport=${CFG_AUTHORITY##*@}
	[[ $CFG_AUTHORITY == *@* ]] || hostport=$CFG_AUTHORITY
	hostport=${hostport%%,*} # first host of a multi-host URL
	if [[ $hostport =~ ^(.*):([0-9]+)$ ]]; then
		CFG_HOST=${BASH_REMATCH[1]}
		CFG_PORT=${BASH_REMATCH[2]}
	else
		CFG_HOST=$hostport
		CFG_PORT=5432
	fi
	[[ -z $CFG_HOST ]] && CFG_HOST=127.0.0.1
else
	# keyword/value connection string, e.g. "host=... port=... dbname=..."
	CFG_KIND=dsn
	CFG_DB=""
	[[ $CFG_URL =~ (^|[[:space:]])dbname=([^[:space:]]+) ]] && CFG_DB=${BASH_REMATCH[2]}
	CFG_PORT=5432
	[[ $CFG_URL =~ (^|[[:space:]])port=([0-9]+) ]] && CFG_PORT=${BASH_REMATCH[2]}
	CFG_HOST=127.0.0.1
	[[ $CFG_URL =~ (^|[[:space:]])host=([^[:space:]]+) ]] && CFG_HOST=${BASH_REMATCH[2]}
fi
CFG_DB=${CFG_DB:-postgres}

# url_for_db DB: the configured URL, pointing at database DB.
url_for_db() {
	if [[ $CFG_KIND == url ]]; then
		local u="${CFG_SCHEME}://${CFG_AUTHORITY}/$1"
		[[ -n $CFG_QUERY ]] && u+="?${CFG_QUERY}"
		printf '%s' "$u"
	else
		printf '%s dbname=%s' "$CFG_URL" "$1"
	fi
}

# redact URL: the URL with its password replaced by "***" (for messages).
redact() {
	local u=$1
	if [[ $u =~ ^([a-z]+://[^/@:]*):[^/@]*@(.*)$ ]]; then
		u="${BASH_REMATCH[1]}:***@${BASH_REMATCH[2]}"
	fi
	u=$(printf '%s' "$u" | sed -E 's/(^|[[:space:]&?])password=[^[:space:]&]*/\1password=***/g')
	printf '%s' "$u"
}

# die_explicit REASON: the configured server cannot be used; say so and stop.
die_explicit() {
	die "$EXPLICIT_WHAT names the server $(redact "$CFG_URL") ($CFG_HOST:$CFG_PORT), and $1." \
		"Not falling back to a throwaway local cluster: messages would go to a database nobody reads." \
		"Fix $EXPLICIT_WHAT (host, port, user, password, database) or start that server;" \
		"unset DATABASE_URL and every PG_* variable to use a local server or a throwaway cluster in .data/pg."
}

if [[ $MODE == ensure ]]; then
	DBNAME=${DBNAME:-$CFG_DB}
	[[ $DBNAME =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]] ||
		die "database name '$DBNAME' is not supported (use letters, digits, '_', '.', '-')"
fi

# create_db ADMIN_URL TARGET_URL: make sure DBNAME exists (ADMIN_URL works).
create_db() {
	local admin=$1 target=$2 out
	try_psql "$target" && return 0
	log "creating database \"$DBNAME\""
	if ! out=$(PGCONNECT_TIMEOUT=$CONNECT_TIMEOUT "$PSQL" -X -w -q -v ON_ERROR_STOP=1 -v db="$DBNAME" -d "$admin" 2>&1 <<'SQL'
SELECT format('CREATE DATABASE %I', :'db')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
	); then
		# A concurrent caller may have created it first.
		try_psql "$target" && return 0
		LAST_ERR=$(printf '%s' "$out" | head -n 3 | tr -s '\n\t' '  ')
		return 1
	fi
	try_psql "$target"
}

# ------------------------------------------------------- throwaway cluster
# Where the cluster lives. As root, the cluster runs as "postgres", which must
# be able to reach the directory; a repo under /root (mode 0700) is not
# reachable, so then the cluster lives under /var/tmp and .data/pg is a symlink.
DATA_BASE=$REPO/.data
PG_OWNER=""

setup_owner() {
	if [[ $IS_ROOT -eq 1 ]]; then
		PG_OWNER=postgres
		if ! id -u postgres >/dev/null 2>&1; then
			log "creating system user 'postgres'"
			useradd --system --user-group --home-dir /var/lib/postgresql --no-create-home \
				--shell /bin/bash --comment "PostgreSQL administrator" postgres ||
				die "could not create the 'postgres' system user (initdb refuses to run as root)"
		fi
	fi
}

# as_pg CMD...: run CMD as the cluster owner, from a directory it can read.
# fds 3 (our real stdout) and 9 (the lock) are closed: a postmaster started
# from here must not inherit them, or callers like $(ensure-postgres.sh)
# would wait for it forever, and the lock would never be released.
as_pg() {
	if [[ -n $PG_OWNER ]]; then
		(cd / && exec runuser -u "$PG_OWNER" -- "$@") 3>&- 9>&-
	else
		(cd / && exec "$@") 3>&- 9>&-
	fi
}

choose_data_base() {
	mkdir -p "$REPO/.data"
	DATA_BASE=$REPO/.data
	if [[ -n $PG_OWNER ]]; then
		if [[ -L $REPO/.data/pg ]] || ! runuser -u "$PG_OWNER" -- test -x "$REPO/.data" 2>/dev/null; then
			local hash
			hash=$(printf '%s' "$REPO" | sha1sum | cut -c1-12)
			DATA_BASE=/var/tmp/regina-pg-$hash
			mkdir -p "$DATA_BASE"
			chown "$PG_OWNER": "$DATA_BASE"
			chmod 0700 "$DATA_BASE"
			if [[ ! -L $REPO/.data/pg ]]; then
				log "user '$PG_OWNER' cannot reach $REPO/.data; keeping the cluster in $DATA_BASE (symlinked from .data/pg)"
				[[ -e $REPO/.data/pg ]] || ln -s "$DATA_BASE/pg" "$REPO/.data/pg"
			fi
		else
			chown "$PG_OWNER": "$DATA_BASE"
		fi
	fi
	PGDATA_DIR=$DATA_BASE/pg
	PGLOG=$DATA_BASE/pg.log
	PGSOCK=$DATA_BASE/run
}

cluster_exists() { [[ -f $PGDATA_DIR/PG_VERSION ]]; }

# Sets BINDIR to the bin dir with initdb/pg_ctl matching the cluster (if any).
find_server_bins() {
	BINDIR=""
	if cluster_exists; then
		local v
		v=$(cat "$PGDATA_DIR/PG_VERSION")
		if [[ -x /usr/lib/postgresql/$v/bin/pg_ctl ]]; then
			BINDIR=/usr/lib/postgresql/$v/bin
			return 0
		fi
		local d
		local vre="\\) ${v//./\\.}([. ]|$)"
		if d=$(pg_bindir pg_ctl) && [[ $("$d/pg_ctl" --version) =~ $vre ]]; then
			BINDIR=$d
			return 0
		fi
		if d=$(pg_bindir pg_ctl); then
			die "the throwaway cluster in $PGDATA_DIR was made by PostgreSQL $v, but the binaries found are: $("$d/pg_ctl" --version)." \
				"Remove it (make db/stop; rm -rf .data) to get a new one, or install PostgreSQL $v."
		fi
		return 1
	fi
	local d
	if d=$(pg_bindir initdb) && [[ -x $d/pg_ctl ]]; then
		BINDIR=$d
		return 0
	fi
	return 1
}

cluster_running() {
	[[ -f $PGDATA_DIR/postmaster.pid ]] || return 1
	as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1
}

cluster_port() { sed -n '4p' "$PGDATA_DIR/postmaster.pid" 2>/dev/null; }

install_postgresql() {
	local why=$1
	local -a pre=()
	if [[ $IS_ROOT -ne 1 ]]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			pre=(sudo -n)
		else
			TRIED+=("installing postgresql: not root and no password-less sudo")
			return 1
		fi
	fi
	command -v apt-get >/dev/null 2>&1 || {
		TRIED+=("installing postgresql: apt-get not found")
		return 1
	}
	log "$why; installing Debian's postgresql package with apt-get (this takes a minute)"
	if ! "${pre[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update </dev/null; then
		TRIED+=("apt-get update: failed")
		return 1
	fi
	if ! "${pre[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends postgresql </dev/null; then
		TRIED+=("apt-get install postgresql: failed")
		return 1
	fi
	hash -r
	return 0
}

start_cluster() {
	if ! cluster_exists; then
		if [[ -d $PGDATA_DIR ]] && [[ -n $(ls -A "$PGDATA_DIR" 2>/dev/null) ]]; then
			die "$PGDATA_DIR exists but is not a PostgreSQL cluster; remove it (rm -rf .data) and retry"
		fi
		log "initdb: creating a throwaway cluster in $PGDATA_DIR"
		mkdir -p "$PGDATA_DIR"
		chmod 0700 "$PGDATA_DIR"
		[[ -n $PG_OWNER ]] && chown "$PG_OWNER": "$PGDATA_DIR"
		local out
		if ! out=$(as_pg "$BINDIR/initdb" -D "$PGDATA_DIR" -U postgres --auth=trust -E UTF8 --locale=C 2>&1); then
			printf '%s\n' "$out" | tail -n 20 >&2
			rm -rf "$PGDATA_DIR"
			die "initdb failed (see above)." \
				"Tried: ${TRIED[*]:-}" \
				"You can set DATABASE_URL to a reachable PostgreSQL server instead."
		fi
	fi

	local port="" p
	if ! port_in_use "$CFG_PORT"; then
		port=$CFG_PORT
	else
		for p in $(seq 55432 55441); do
			if ! port_in_use "$p"; then
				port=$p
				break
			fi
		done
	fi
	[[ -n $port ]] || die "no free port for the throwaway cluster (tried $CFG_PORT and 55432-55441)"

	mkdir -p "$PGSOCK"
	touch "$PGLOG"
	if [[ -n $PG_OWNER ]]; then
		chown "$PG_OWNER": "$PGSOCK" "$PGLOG"
	fi
	local sockopt="-k '$PGSOCK'"
	# Unix socket paths are limited to 107 bytes; go TCP-only if too long.
	if ((${#PGSOCK} + 16 > 107)); then
		sockopt="-k ''"
	fi
	log "starting the throwaway cluster on 127.0.0.1:$port (log: $PGLOG)"
	if ! as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$PGLOG" -w -t 60 \
		-o "-p $port $sockopt -c listen_addresses=127.0.0.1" start >/dev/null; then
		tail -n 20 "$PGLOG" >&2 || true
		die "pg_ctl start failed for $PGDATA_DIR (log: $PGLOG, shown above)." \
			"Tried: ${TRIED[*]:-}" \
			"You can set DATABASE_URL to a reachable PostgreSQL server instead."
	fi
}

fail_all() {
	local t
	log "could not find or start PostgreSQL. Tried:"
	for t in "${TRIED[@]}"; do log "  - $t"; done
	die "What you can do:" \
		"  - set DATABASE_URL to a reachable server, e.g. DATABASE_URL=postgres://user:pass@host:5432/db?sslmode=disable" \
		"  - or install PostgreSQL (Debian: sudo apt-get install postgresql) and rerun; a throwaway cluster is then made in .data/pg"
}

# ------------------------------------------------------- --stop, --drop
# stop_cluster: stop the throwaway cluster of this repository if it runs.
# Returns 1 when there is none (PGDATA_DIR is then unset or not a cluster).
stop_cluster() {
	if [[ ! -e $REPO/.data/pg && ! -L $REPO/.data/pg ]] &&
		[[ ! -d /var/tmp/regina-pg-$(printf '%s' "$REPO" | sha1sum | cut -c1-12)/pg ]]; then
		log "no throwaway cluster in $REPO/.data/pg"
		return 1
	fi
	setup_owner
	choose_data_base
	if ! cluster_exists; then
		log "no throwaway cluster in $PGDATA_DIR"
		return 1
	fi
	find_server_bins || die "no pg_ctl found to stop $PGDATA_DIR"
	if cluster_running; then
		log "stopping the throwaway cluster in $PGDATA_DIR"
		as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 60 stop >/dev/null
	else
		log "the throwaway cluster in $PGDATA_DIR is not running"
	fi
	return 0
}

if [[ $MODE == stop ]]; then
	stop_cluster || true
	exit 0
fi

# drop_databases: drop each of DROP_DBS that exists on the configured server.
drop_databases() {
	local db admin out n
	local -a via=()
	for db in "${DROP_DBS[@]}"; do
		[[ $db =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]] || die "database name '$db' is not supported"
	done
	find_psql
	if [[ -z $PSQL ]]; then
		[[ $EXPLICIT -eq 1 ]] && die "psql is not installed: cannot drop ${DROP_DBS[*]} on $CFG_HOST:$CFG_PORT"
		log "psql is not installed: no server checked for ${DROP_DBS[*]}"
		return 0
	fi
	# Connected to a database that is not being dropped.
	for db in postgres template1 "$CFG_DB"; do
		[[ " ${DROP_DBS[*]} " == *" $db "* ]] || via+=("$db")
	done
	find_admin "${via[@]}" || true
	admin=$ADMIN
	if [[ -z $admin ]]; then
		[[ $EXPLICIT -eq 1 ]] && die_explicit "it cannot be reached to drop ${DROP_DBS[*]}: ${LAST_ERR:-no answer}"
		log "no server answers at $CFG_HOST:$CFG_PORT: no database to drop there"
		return 0
	fi
	for db in "${DROP_DBS[@]}"; do
		n=$(PGCONNECT_TIMEOUT=$CONNECT_TIMEOUT "$PSQL" -X -w -Atq -v db="$db" -d "$admin" <<<"SELECT count(*) FROM pg_database WHERE datname = :'db'" 2>&1) ||
			die "could not read the databases of $CFG_HOST:$CFG_PORT: $n"
		if [[ $n != 1 ]]; then
			log "no database \"$db\" on $CFG_HOST:$CFG_PORT"
			continue
		fi
		if ! out=$(PGCONNECT_TIMEOUT=$CONNECT_TIMEOUT "$PSQL" -X -w -q -v ON_ERROR_STOP=1 -v db="$db" -d "$admin" 2>&1 <<'SQL'
SELECT format('DROP DATABASE IF EXISTS %I', :'db') \gexec
SQL
		); then
			die "could not drop database \"$db\" on $CFG_HOST:$CFG_PORT: $(printf '%s' "$out" | head -n 3 | tr -s '\n\t' '  ')" \
				"If a broker (make run) or a test still uses it, stop it first."
		fi
		log "dropped database \"$db\" on $CFG_HOST:$CFG_PORT"
	done
	return 0
}

if [[ $MODE == drop ]]; then
	# The throwaway cluster first (its databases go with it), so that the
	# server checked next is never the cluster, even on port 5432.
	if stop_cluster; then
		log "deleting the throwaway cluster $PGDATA_DIR"
		rm -rf "$PGDATA_DIR" "$PGLOG" "$PGSOCK"
		[[ $DATA_BASE != "$REPO/.data" ]] && rm -rf "$DATA_BASE"
		rm -f "$REPO/.data/pg" "$REPO/.data/.lock" 2>/dev/null || true
		rmdir "$REPO/.data" 2>/dev/null || true
	fi
	drop_databases
	exit 0
fi

# ---------------------------------------------------------------- step 1
find_psql
if [[ -z $PSQL ]]; then
	# psql comes with postgresql-client, which "postgresql" pulls in.
	if [[ -n $PG_ISREADY ]] || port_in_use "$CFG_PORT" "$CFG_HOST"; then
		log "psql not found (needed to check and create database \"$DBNAME\")"
	fi
	if install_postgresql "psql not found"; then
		find_psql
	fi
	if [[ -z $PSQL ]]; then
		if server_answers "$(url_for_db "$DBNAME")" "$CFG_PORT" "$CFG_HOST"; then
			log "WARNING: psql is missing; a server answers at the configured address but database \"$DBNAME\" could not be checked or created"
			printf '%s\n' "$(url_for_db "$DBNAME")" >&3
			exit 0
		fi
		[[ $EXPLICIT -eq 1 ]] && die_explicit "it does not answer (and psql is not installed)"
		TRIED+=("configured server $CFG_HOST:$CFG_PORT: no answer (and psql is not installed)")
		fail_all
	fi
fi

TARGET=$(url_for_db "$DBNAME")
if try_psql "$TARGET"; then
	printf '%s\n' "$TARGET" >&3
	exit 0
fi
first_err=$LAST_ERR
if server_answers "$TARGET" "$CFG_PORT" "$CFG_HOST"; then
	# A server is there: maybe only the database is missing.
	find_admin "$CFG_DB" postgres template1 || true
	admin=$ADMIN
	if [[ -n $admin ]]; then
		if create_db "$admin" "$TARGET"; then
			printf '%s\n' "$TARGET" >&3
			exit 0
		fi
		die "the server at $CFG_HOST:$CFG_PORT answers, but database \"$DBNAME\" could not be created: $LAST_ERR" \
			"Create it yourself, or use a role allowed to (CREATEDB)."
	fi
	[[ $EXPLICIT -eq 1 ]] && die_explicit "it answers but refuses the connection: $first_err"
	log "a server answers at $CFG_HOST:$CFG_PORT but refuses us ($first_err)"
	TRIED+=("default server $CFG_HOST:$CFG_PORT: refused ($first_err)")
else
	[[ $EXPLICIT -eq 1 ]] && die_explicit "it does not answer: ${first_err:-no connection within ${CONNECT_TIMEOUT}s}"
	TRIED+=("default server $CFG_HOST:$CFG_PORT: no answer")
fi

# Nothing was configured and the default server is not usable: a throwaway
# cluster is the fallback. Say so loudly, every time.
THROWAWAY_NOTE=1

# ---------------------------------------------------------------- step 2/3
setup_owner
choose_data_base

# Serialise concurrent callers (e.g. make run and make test at once).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$REPO/.data/.lock"
	flock -w 300 9 || die "timed out waiting for another ensure-postgres.sh (lock $REPO/.data/.lock)"
fi

if ! find_server_bins; then
	TRIED+=("throwaway cluster: no initdb/pg_ctl in /usr/lib/postgresql/*/bin or on PATH")
	install_postgresql "no PostgreSQL server binaries found" || fail_all
	find_psql
	find_server_bins || {
		TRIED+=("after installing postgresql: still no initdb/pg_ctl")
		fail_all
	}
fi
[[ -n $PSQL ]] || {
	TRIED+=("psql not found")
	fail_all
}

if ! cluster_running; then
	start_cluster
fi
port=$(cluster_port)
[[ -n $port ]] || die "could not read the port of the throwaway cluster from $PGDATA_DIR/postmaster.pid"

admin="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
TARGET="postgres://postgres@127.0.0.1:$port/$DBNAME?sslmode=disable"
if [[ ${THROWAWAY_NOTE:-0} -eq 1 ]]; then
	log "=================================================================="
	log "NOTE: no DATABASE_URL or PG_* is set and nothing usable answers at"
	log "$CFG_HOST:$CFG_PORT, so this uses a THROWAWAY PostgreSQL cluster:"
	log "  $PGDATA_DIR on 127.0.0.1:$port (database \"$DBNAME\")"
	log "Its data lives only there. make db/stop stops it; rm -rf .data deletes it."
	log "Set DATABASE_URL (or PG_HOST, PG_PORT, ...) to use your own server."
	log "=================================================================="
fi
if try_psql "$TARGET"; then
	printf '%s\n' "$TARGET" >&3
	exit 0
fi
if ! try_psql "$admin"; then
	die "the throwaway cluster in $PGDATA_DIR runs on port $port but does not accept connections: $LAST_ERR" \
		"Log: $PGLOG. Try: make db/stop; rm -rf .data"
fi
create_db "$admin" "$TARGET" ||
	die "could not create database \"$DBNAME\" in the throwaway cluster: $LAST_ERR"
printf '%s\n' "$TARGET" >&3
