#!/usr/bin/env bash
# The README's main job: install what is needed, build, then bring up the local lab and provision
# a fleet end to end against two real puppetservers. Pass lab options through, e.g. --nodes 6.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
node dist/src/cli/main.js lab up "$@"
