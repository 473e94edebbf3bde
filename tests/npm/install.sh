#!/usr/bin/env bash
# Installs the pinned reference implementations (package.json and
# package-lock.json beside this script) into DEST/node_modules, once: a second
# call with an unchanged lock file returns at once. Used by the text parity
# tests (CTest fixture "npm_references") and by hand.
set -euo pipefail
dest=${1:?usage: install.sh DEST}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dest"
if [[ -f "$dest/.installed" ]] && cmp -s "$here/package-lock.json" "$dest/.installed"; then
  exit 0
fi
command -v npm >/dev/null || { echo "install.sh: npm not found (deploy/setup.sh installs nodejs and npm)" >&2; exit 1; }
cp "$here/package.json" "$here/package-lock.json" "$dest/"
echo "install.sh: installing reference packages into $dest"
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
cp "$here/package-lock.json" "$dest/.installed"
