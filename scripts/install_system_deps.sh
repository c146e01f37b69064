#!/usr/bin/env bash
# System packages the tests need (Debian): installed only when missing.
#   libb64-0d  - perf_analyzer (model configuration extension test)
#   chromium   - browser tests of the web UI (Playwright drives it)
#   wrk, nghttp2-client (h2load) - load generators of `make bench`
set -euo pipefail
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
