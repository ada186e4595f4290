#!/usr/bin/env bash
# Bring up the real test bed once per run (each step is idempotent and skips when already done).
#   up.sh            every step (the tests need them all)
#   up.sh 10 20 40 50  only the numbered steps (`make site`: the Docker engine, the base image, the tiny model,
#                      the cpu image)
set -euo pipefail
cd "$(dirname "$0")/../.."
for step in scripts/testbed/[0-9][0-9]-*.sh; do
  [ -e "$step" ] || continue
  if [ "$#" -gt 0 ]; then
    number=$(basename "$step" | cut -c1-2)
    case " $* " in *" $number "*) ;; *) continue ;; esac
  fi
  echo "=== testbed: $step"
  started=$SECONDS
  bash "$step"
  echo "=== testbed: $step done in $((SECONDS - started)) s"
done
