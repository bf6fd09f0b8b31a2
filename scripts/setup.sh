#!/usr/bin/env bash
# Installs everything muster needs on a Debian machine, idempotently: system packages (nats-server,
# puppetserver, puppet-agent, facter, openssl for the lab and test CAs, monitoring-plugins-basic for the
# lab nodes' NRPE checks, systemd for systemd-analyze and dpkg-deb for the package test, chromium for
# the web console's browser tests and bench; for the lab's machines systemd-container (nspawn),
# mmdebstrap (their image), socat (relays), iproute2 (their network), openssh-client, and for --vm
# qemu-system-x86, qemu-utils and cloud-image-utils; lintian for the package test, apt-utils and gpg
# for its signed apt repository, piuparts for `npm run piuparts`, strace for the privileged helper's
# hostile tests, which delay its chown to widen a race), node modules (npm ci), and the TypeScript
# build.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in nats-server puppetserver puppet-agent facter openssl monitoring-plugins-basic systemd dpkg passwd chromium \
  systemd-container mmdebstrap socat iproute2 openssh-client qemu-system-x86 qemu-utils cloud-image-utils \
  lintian apt-utils gpg piuparts strace; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing system packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's puppetserver package enables a system service we never use; the lab and tests run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet puppetserver 2>/dev/null; then
  systemctl stop puppetserver || true
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "==> npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
# The Node.js runtime the package ships (packaging/runtime: pinned in its own lock file).
if [ ! -d packaging/runtime/node_modules ] || [ packaging/runtime/package-lock.json -nt packaging/runtime/node_modules/.package-lock.json ]; then
  echo "==> npm ci (the shipped Node.js runtime, packaging/runtime)"
  npm ci --prefix packaging/runtime --no-audit --no-fund --loglevel=error
fi
echo "==> build"
npm run --silent build
# Put `muster` on PATH (a link to this checkout), so plain `muster ...` works, e.g. against the lab.
if [ "$(readlink -f "$(command -v muster 2>/dev/null)" 2>/dev/null)" != "$(readlink -f dist/src/cli/main.js)" ]; then
  npm link --silent --no-audit --no-fund >/dev/null 2>&1 && echo "==> linked: $(command -v muster)" || echo "note: could not put muster on PATH (npm link); use node $PWD/dist/src/cli/main.js"
fi
