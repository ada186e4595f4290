#!/usr/bin/env bash
# Install Debian's docker-registry (Docker Distribution 2.8) for the vllm_image push test. Idempotent.
# The test (tests/integration/image/test_vllm_image_distribution.py) starts its own registry as a plain
# process on 127.0.0.1 (port 18150-18199) with a config file in a temp dir; nothing is started here and
# Debian's packaged service is not used (no systemd on the test bed).
set -euo pipefail
# shellcheck source=scripts/testbed/apt.sh
source "$(dirname "$0")/apt.sh"
if command -v docker-registry >/dev/null 2>&1; then
  echo "testbed: docker-registry $(docker-registry --version 2>/dev/null | awk '{print $3}') present"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt_get install -y --no-install-recommends docker-registry >/dev/null \
  || { apt_get update >/dev/null && apt_get install -y --no-install-recommends docker-registry >/dev/null; }
# The package's postinst may have launched its own instance where an init system exists; we do not use it.
echo "testbed: docker-registry installed"
