#!/usr/bin/env bash
# Installs everything Tandem needs to build and test, from Debian packages.
# Idempotent: packages already present are skipped, so a second run is quick.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git curl
  libboost-dev                      # Boost.Interprocess (header-only)
  libzmq3-dev cppzmq-dev            # control plane
  capnproto libcapnp-dev            # message schemas (compiler + library)
  libnuma-dev libhwloc-dev          # topology and NUMA placement
  libspdlog-dev libfmt-dev          # logging
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev                # config.json, safetensors headers
  clang libclang-rt-14-dev          # libFuzzer and sanitizer runtimes
  gdb                               # the --hold test attaches it to a worker
  nodejs npm                        # reference implementations used by tests (npm packages)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# nodejs/npm may come from elsewhere on a machine (e.g. a prebuilt node); accept that.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
