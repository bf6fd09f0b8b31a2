#!/usr/bin/env bash
# The README's test command: install what is needed, build, run every test against real
# nats-server, puppetserver and puppet agent processes (started and stopped by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "==> tests"
node scripts/run-tests.mjs "$@"
