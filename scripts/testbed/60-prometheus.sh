#!/usr/bin/env bash
# Prometheus 2.42 + promtool from Debian's packages, for `promtool check/test rules` and the
# integration test (a real Prometheus scraping the real vLLM). Idempotent.
# The package's init script would start a system-wide Prometheus on :9090; the tests start their own
# instance on 127.0.0.1:19090 with their own config, so a daemon started by the package is stopped.
set -euo pipefail
# shellcheck source=scripts/testbed/apt.sh
source "$(dirname "$0")/apt.sh"
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "testbed: prometheus already installed ($(prometheus --version 2>&1 | head -n 1))"
  exit 0
fi
echo "testbed: installing prometheus (with promtool) from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt_get update -qq
apt_get install -y -qq --no-install-recommends prometheus >/dev/null
# No systemd on the test host: the sysvinit script may have started the packaged daemon. Stop only it.
if [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then
  /etc/init.d/prometheus stop >/dev/null 2>&1 || true
fi
prometheus --version 2>&1 | head -n 1
promtool --version 2>&1 | head -n 1
