#!/usr/bin/env bash
# The README's test command: installs what the tests need when it is missing,
# then runs the whole suite with the race detector.
#
#   scripts/test.sh                 # set up, then go test -race ./...
#   scripts/test.sh -count=1 -v     # extra arguments go to go test
#   scripts/test.sh --setup-only    # set up and stop
#
# What the tests need beyond Go:
#   - Chromium, for the review UI's browser tests (web/). Debian's package is
#     installed with apt-get when this runs as root; otherwise the script
#     prints the one command to run as root and stops. STET_CHROMIUM may name
#     another Chrome binary instead.
#   - axe-core 4.14.1, the accessibility checker those tests inject, installed
#     with npm into .cache/axe (ignored by git). STET_AXE_JS may name another
#     copy of axe.min.js instead.
#   - PocketSphinx and its US English model (Debian's pocketsphinx and
#     pocketsphinx-en-us), the offline transcriber that audio reports use by
#     default; installed with apt-get when this runs as root.
#
# Both checks are idempotent: the second run installs nothing and starts the
# tests at once. The script sets STET_BROWSER_TESTS=require, so a browser or
# transcriber test that cannot find its dependencies fails instead of
# skipping (a plain `go test ./...` skips them with a line naming this script
# or the package to install).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

axe_version=4.14.1
chromium_cmd="apt-get install -y --no-install-recommends chromium"

say() { echo "test.sh: $*" >&2; }

have_chromium() {
  [ -n "${STET_CHROMIUM:-}" ] && return 0
  local name
  for name in chromium chromium-browser google-chrome google-chrome-stable; do
    command -v "$name" >/dev/null 2>&1 && return 0
  done
  return 1
}

if ! have_chromium; then
  if [ "$(id -u)" != 0 ]; then
    say "the browser tests need Chromium, which is not on PATH. Run this as root, then run scripts/test.sh again:"
    echo "  $chromium_cmd" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    say "the browser tests need Chromium and this machine has no apt-get; install Chromium, or set STET_CHROMIUM to a Chrome binary"
    exit 1
  fi
  say "installing Debian's chromium for the browser tests: $chromium_cmd"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  if ! have_chromium; then
    say "apt-get installed chromium but it is not on PATH ($PATH)"
    exit 1
  fi
fi

pocketsphinx_cmd="apt-get install -y --no-install-recommends pocketsphinx pocketsphinx-en-us"
have_pocketsphinx() {
  # Where Debian's packages put the recognizer and its model, which is where
  # the offline transcriber looks by default.
  { command -v pocketsphinx_continuous >/dev/null 2>&1 || [ -x /usr/bin/pocketsphinx_continuous ]; } &&
    [ -d /usr/share/pocketsphinx/model/en-us ]
}
if ! have_pocketsphinx; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "the offline transcriber's tests need PocketSphinx and its US English model. Run this as root, then run scripts/test.sh again:"
    echo "  $pocketsphinx_cmd" >&2
    exit 1
  fi
  say "installing Debian's pocketsphinx and pocketsphinx-en-us for the transcriber tests: $pocketsphinx_cmd"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pocketsphinx pocketsphinx-en-us >/dev/null
  if ! have_pocketsphinx; then
    say "apt-get installed pocketsphinx but pocketsphinx_continuous or its en-us model is missing"
    exit 1
  fi
fi

axe_js=.cache/axe/node_modules/axe-core/axe.min.js
if [ -z "${STET_AXE_JS:-}" ] && [ ! -f "$axe_js" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    say "the accessibility test needs axe-core, installed with npm, and npm is not on PATH. Install npm (Debian: apt-get install -y npm), then run scripts/test.sh again"
    exit 1
  fi
  say "installing axe-core@$axe_version for the accessibility test into .cache/axe (npm)"
  npm install --prefix .cache/axe --no-audit --no-fund --loglevel=error "axe-core@$axe_version" >/dev/null
  if [ ! -f "$axe_js" ]; then
    say "npm finished but $axe_js is missing"
    exit 1
  fi
fi

if [ "${1:-}" = "--setup-only" ]; then
  say "set-up complete: Chromium, axe-core and PocketSphinx are in place"
  exit 0
fi

export STET_BROWSER_TESTS=require
exec go test -race "$@" ./...
