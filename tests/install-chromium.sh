#!/usr/bin/env bash
# Install Debian's chromium for the report's browser test (tests/test_report.py), when missing.
# Needs root and apt-get; elsewhere it says so and the browser test is skipped.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "install-chromium: no root apt-get here; install Debian's 'chromium' package to run the browser test" >&2
  exit 0
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
  # A package mirror hiccup must not fail the whole suite: the browser test then skips, saying why.
  echo "install-chromium: apt-get could not install chromium; the browser test will be skipped" >&2
fi
