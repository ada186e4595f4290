#!/usr/bin/env bash
# Bring up the real test bed once per run (each step is idempotent and skips when already done).
set -euo pipefail
cd "$(dirname "$0")/../.."
for step in scripts/testbed/[0-9][0-9]-*.sh; do
  [ -e "$step" ] || continue
  echo "=== testbed: $step"
  bash "$step"
done
