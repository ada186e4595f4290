#!/usr/bin/env bash
# Install Docker from Debian's packages and start the daemon the way this environment allows:
# no default bridge, no iptables; containers use host networking. Idempotent.
set -euo pipefail
# shellcheck source=scripts/testbed/apt.sh
source "$(dirname "$0")/apt.sh"
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  echo "testbed: installing docker.io and debootstrap from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq docker.io debootstrap >/dev/null
fi
if docker info >/dev/null 2>&1; then
  echo "testbed: Docker engine already running"
  exit 0
fi
echo "testbed: starting dockerd (--bridge=none --iptables=false)"
mkdir -p /var/log
nohup dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
  >/var/log/dockerd.log 2>&1 &
up=false
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { up=true; break; }
  sleep 1
done
if [ "$up" != true ]; then
  echo "testbed: dockerd did not start; last log lines:" >&2
  tail -n 30 /var/log/dockerd.log >&2
  exit 1
fi
echo "testbed: Docker engine up"
# The engine keeps its containers on disk, and those with a restart policy come back with it. A run that was
# cut off (a machine stopped mid-test) leaves its lab behind: three vLLM replicas that start again here, eat
# the cores and make the next run's lab fixture refuse to start. No test can be running on an engine this
# script has just started, so remove what the tests create: containers named vf-* and the product's own
# (label vllm_fleet.role), e.g. `make site`'s vllm on localhost.
mapfile -t leftovers < <( { docker ps -aq --filter 'name=^vf-'; docker ps -aq --filter 'label=vllm_fleet.role'; } | sort -u)
if [ "${#leftovers[@]}" -gt 0 ]; then
  echo "testbed: removing ${#leftovers[@]} container(s) left by an earlier run:" \
    "$(docker inspect --format '{{.Name}}' "${leftovers[@]}" | tr -d / | tr '\n' ' ')"
  docker rm -f "${leftovers[@]}" >/dev/null
fi
