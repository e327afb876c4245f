#!/usr/bin/env bash
# What the test suite needs beyond Python, on a Debian machine: PostgreSQL
# running, libfaketime (tests/postgres/test_pg_clock_skew.py), Chromium
# (tests/dashboard/test_dashboard_browser.py) and promtool, from Debian's
# prometheus package (tests/unit/test_alert_rules.py), redis-server (the
# Redis store's tests start their own, tests/support/redis.py) and openssl (a
# certificate for the TLS test, tests/store/test_redis_transports.py). `make test` runs this first.
#
# Idempotent and quiet: it does nothing when all is there. It starts the local
# PostgreSQL cluster if it is down and installs missing Debian packages when it
# runs as root with apt-get; otherwise it prints one line saying what is
# missing (the tests that need it then fail with the same advice).
set -euo pipefail

missing=()
say() { echo "test-deps: $*" >&2; }

can_apt() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; }

apt_updated=
apt_install() {
  local log
  log=$(mktemp)
  if [ -z "$apt_updated" ]; then
    apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; return 1; }
    apt_updated=1
  fi
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

# PostgreSQL: the server the tests use (CHIT_TEST_POSTGRES_URL), started only
# when it is the local default one and it is down.
postgres() {
  [ "${CHIT_TEST_SKIP_POSTGRES:-}" = 1 ] && return 0
  case "${CHIT_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/test}" in
    *@127.0.0.1:5432/* | *@localhost:5432/*) ;;
    *) return 0 ;;  # another server: not ours to start
  esac
  if ! command -v pg_isready >/dev/null; then
    missing+=("PostgreSQL (apt-get install postgresql, or set CHIT_TEST_POSTGRES_URL)")
    return 0
  fi
  pg_isready -q -h 127.0.0.1 -p 5432 && return 0
  local version
  version=$(ls /etc/postgresql 2>/dev/null | head -n 1)
  if [ -z "$version" ] || ! command -v pg_ctlcluster >/dev/null; then
    missing+=("a running PostgreSQL at 127.0.0.1:5432 (no cluster in /etc/postgresql to start)")
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    missing+=("a running PostgreSQL at 127.0.0.1:5432 (start it: sudo pg_ctlcluster $version main start)")
    return 0
  fi
  say "starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 0.5
  done
  missing+=("a running PostgreSQL at 127.0.0.1:5432 (pg_ctlcluster $version main start did not bring it up)")
}

have_libfaketime() { compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null; }
have_chromium() { [ -x "${CHIT_TEST_CHROMIUM:-/usr/bin/chromium}" ]; }
have_promtool() { command -v promtool >/dev/null; }
have_redis() { [ -n "${CHIT_TEST_REDIS_SERVER:-}" ] || command -v redis-server >/dev/null; }
have_openssl() { command -v openssl >/dev/null; }

packages() {
  local want=()
  have_libfaketime || want+=(faketime)
  have_chromium || want+=(chromium)
  have_promtool || want+=(prometheus)
  have_redis || want+=(redis-server)
  have_openssl || want+=(openssl)
  [ ${#want[@]} -eq 0 ] && return 0
  if ! can_apt; then
    missing+=("Debian packages ${want[*]} (as root: apt-get install ${want[*]})")
    return 0
  fi
  say "installing ${want[*]} (apt-get)"
  apt_install "${want[@]}" || missing+=("Debian packages ${want[*]} (apt-get install failed)")
}

postgres
packages
if [ ${#missing[@]} -gt 0 ]; then
  for m in "${missing[@]}"; do say "missing: $m; the tests that need it will fail"; done
fi
exit 0
