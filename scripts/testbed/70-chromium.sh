#!/usr/bin/env bash
# Headless Chromium + chromedriver from Debian's packages, for the fleet plan report's browser test
# (tests/integration/preflight/test_report_browser.py drives chromedriver over WebDriver on 127.0.0.1).
# Idempotent: installs only what is missing.
set -euo pipefail
# shellcheck source=scripts/testbed/apt.sh
source "$(dirname "$0")/apt.sh"
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  echo "testbed: chromium $(chromium --version 2>/dev/null | awk '{print $2}') and chromedriver already installed"
  exit 0
fi
echo "testbed: installing chromium and chromium-driver from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt_get update -qq
apt_get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
chromium --version
chromedriver --version
