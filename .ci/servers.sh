#!/usr/bin/env bash
# Make sure the real servers the integration tests use are running on their standard loopback
# ports: Redis 6379, RabbitMQ 5672, PostgreSQL 5432. Each is found, else started, else installed
# from the distribution's packages (needs root and apt) and started. Idempotent; prints one line
# per server.
set -u

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 120); do listening "$1" && return 0; sleep 0.5; done
  return 1
}

apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "servers: cannot install $* (need root and apt-get); install it by hand" >&2
    return 1
  fi
  if [ -z "${_APT_UPDATED:-}" ]; then apt-get update -qq >/dev/null 2>&1; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

ensure_redis() {
  listening 6379 && { echo "servers: redis found on 6379"; return; }
  command -v redis-server >/dev/null || apt_install redis-server || return 1
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  wait_port 6379 && echo "servers: redis started on 6379"
}

ensure_rabbitmq() {
  listening 5672 && { echo "servers: rabbitmq found on 5672"; return; }
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server || return 1
  rabbitmq-server -detached >/dev/null 2>&1
  wait_port 5672 && echo "servers: rabbitmq started on 5672"
}

ensure_postgres() {
  listening 5432 && { echo "servers: postgres found on 5432"; return; }
  command -v pg_ctlcluster >/dev/null || apt_install postgresql || return 1
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1
  wait_port 5432 || return 1
  # The tests connect as postgres/postgres over TCP; a fresh cluster needs that password.
  su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null 2>&1 || true
  echo "servers: postgres started on 5432"
}

ensure_postgres_binaries() {
  # tests/reliability/test_faults.py kills -9 a private cluster of its own (initdb + postgres on a
  # free port, run as the `postgres` user under root), so the server binaries must be here even
  # when 5432 answers from elsewhere. Debian keeps them in /usr/lib/postgresql/<version>/bin.
  if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "servers: postgres server binaries found"; return
  fi
  apt_install postgresql || return 1
  echo "servers: postgres server binaries installed"
}

ensure_chromium() {
  # The run page's end-to-end test (tests/e2e/test_run_page.py) drives Debian's headless Chromium.
  [ -x /usr/bin/chromium ] && { echo "servers: chromium found"; return; }
  apt_install chromium || return 1
  echo "servers: chromium installed"
}

ensure_prometheus() {
  # Not a server the tests find running: tests/integration/test_compose_stack.py starts its own with a
  # generated config. This makes sure Debian's prometheus (and promtool) are installed.
  command -v prometheus >/dev/null && command -v promtool >/dev/null && { echo "servers: prometheus found"; return; }
  apt_install prometheus || return 1
  echo "servers: prometheus installed"
}

ensure_nft() {
  # The multi-host tests drop packets on a host's cable with nftables (tests/hosts/netns.py: Network.lose),
  # the kernel's loss where it has no netem.
  command -v nft >/dev/null && { echo "servers: nft found"; return; }
  apt_install nftables || return 1
  echo "servers: nftables installed"
}

status=0
ensure_chromium || status=1
ensure_nft || status=1
ensure_redis || status=1
ensure_rabbitmq || status=1
ensure_postgres || status=1
ensure_postgres_binaries || status=1
ensure_prometheus || status=1
exit $status
