#!/usr/bin/env bash
# Install Docker from Debian's packages and start the daemon the way this environment allows:
# no default bridge, no iptables; containers use host networking. Idempotent.
set -euo pipefail
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  echo "testbed: installing docker.io and debootstrap from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if docker info >/dev/null 2>&1; then
  echo "testbed: Docker engine already running"
  exit 0
fi
echo "testbed: starting dockerd (--bridge=none --iptables=false)"
mkdir -p /var/log
nohup dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
  >/var/log/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { echo "testbed: Docker engine up"; exit 0; }
  sleep 1
done
echo "testbed: dockerd did not start; last log lines:" >&2
tail -n 30 /var/log/dockerd.log >&2
exit 1
