#!/usr/bin/env bash
# Installs dependencies, builds, and runs Tandem's main job on the embedded
# default model (made by the project's own generator at build time, so no
# ../shared is needed). Today the main job describes the model it loaded;
# later issues make it generate text through the full process graph.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
bash deploy/build.sh
exec build/bin/tandem inspect "$@"
