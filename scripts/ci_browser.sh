#!/usr/bin/env bash
# Install (Debian) headless Chromium and its WebDriver for tests/test_report_browser.py, unless
# both are already on PATH. For CI and developers' machines (needs root).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# no recommended packages (printing, desktop services); one font so text has glyphs
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-liberation >/dev/null
chromedriver --version
