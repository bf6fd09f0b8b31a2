#!/usr/bin/env bash
# Installs everything muster needs on a Debian machine, idempotently: system packages (nats-server,
# puppetserver, puppet-agent, facter, openssl for the lab and test CAs, monitoring-plugins-basic for the
# lab nodes' NRPE checks, systemd for systemd-analyze and dpkg-deb for the package test, chromium for
# the web console's browser tests and bench; for the lab's machines systemd-container (nspawn),
# mmdebstrap (their image), socat (relays), iproute2 (their network; its ss for the broker liveness test), openssh-client, and for --vm
# qemu-system-x86, qemu-utils and cloud-image-utils; lintian for the package test, apt-utils and gpg
# for its signed apt repository, piuparts for `npm run piuparts`, strace for the privileged helper's
# hostile tests, which delay its chown to widen a race; bsdutils for `script`, the pty the help test
# lays help out on; puppetdb, its PostgreSQL and
# puppet-terminus-puppetdb for the PuppetDB tests and bench), node modules (npm ci), and the
# TypeScript build (skipped when dist/ is newer than every source: the test suite runs
# ./scripts/lab.sh while its other files run from dist/, and tsc rewrites every file it emits).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
for pkg in nats-server puppetserver puppet-agent facter openssl monitoring-plugins-basic systemd dpkg passwd chromium \
  systemd-container mmdebstrap socat iproute2 openssh-client qemu-system-x86 qemu-utils cloud-image-utils \
  lintian apt-utils gpg piuparts strace bsdutils postgresql puppetdb puppet-terminus-puppetdb; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  # puppetdb's package would make its database in the machine's own PostgreSQL (dbconfig-common):
  # the tests and the bench start clusters of their own (test/support/puppetdb.ts), so it is told not to
  echo "puppetdb puppetdb/dbconfig-install boolean false" | $SUDO debconf-set-selections
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's puppetserver and nats-server packages enable system services we never use; the lab and
# tests run their own. The packaged nats-server would hold 127.0.0.1:4222, the address a command
# with no broker configured tries (test/cli/broker.test.ts proves what it says then): it is masked,
# so it stays off at boot and through upgrades, and stopped if it runs (it did from its install on).
if command -v systemctl >/dev/null 2>&1; then
  if [ "$(systemctl is-enabled nats-server 2>/dev/null)" != masked ] && [ -e /lib/systemd/system/nats-server.service ]; then
    $SUDO systemctl mask nats-server >/dev/null
    echo "==> masked the packaged nats-server service (muster's lab and tests start their own)"
  fi
  # puppetdb and postgresql too: the PuppetDB tests and bench run their own on free loopback ports
  for svc in nats-server puppetserver puppetdb postgresql; do
    if systemctl is-active --quiet "$svc" 2>/dev/null; then $SUDO systemctl stop "$svc" || true; fi
  done
fi

# Whether DIR/node_modules holds every package DIR/package-lock.json pins, at its version (what npm
# recorded installing, node_modules/.package-lock.json): by content, not by the files' times, which a
# checkout changes without changing what is installed.
installed() {
  (cd "$1" && node -e '
    const fs = require("fs");
    const read = (f) => (fs.existsSync(f) ? JSON.parse(fs.readFileSync(f, "utf8")).packages ?? {} : undefined);
    const want = read("package-lock.json"), have = read("node_modules/.package-lock.json");
    const missing = have ? Object.entries(want ?? {}).filter(([k, p]) => k.startsWith("node_modules/") && !p.optional && have[k]?.version !== p.version) : [1];
    process.exit(missing.length ? 1 : 0);
  ')
}
if ! installed .; then
  echo "==> npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
# The Node.js runtime the package ships (packaging/runtime: pinned in its own lock file).
if ! installed packaging/runtime; then
  echo "==> npm ci (the shipped Node.js runtime, packaging/runtime)"
  npm ci --prefix packaging/runtime --no-audit --no-fund --loglevel=error
fi
# dist/.built is stamped by `npm run build`; a source newer than it (an edit, a checkout) rebuilds.
if [ -f dist/.built ] && [ -z "$(find -H src test bench tsconfig.json package.json -newer dist/.built -print -quit)" ]; then
  echo "==> build: dist/ is up to date"
else
  echo "==> build"
  npm run --silent build
fi
# Put `muster` on PATH (a link to this checkout), so plain `muster ...` works, e.g. against the lab.
if [ "$(readlink -f "$(command -v muster 2>/dev/null)" 2>/dev/null)" != "$(readlink -f dist/src/cli/main.cjs)" ]; then
  npm link --silent --no-audit --no-fund >/dev/null 2>&1 && echo "==> linked: $(command -v muster)" || echo "note: could not put muster on PATH (npm link); use node $PWD/dist/src/cli/main.js"
fi
