#!/usr/bin/env bash
# Installs odradek and runs the main job: the broker on its embedded default
# (127.0.0.1:9092, data in ./odradek-data) plus the demo pipeline (an activity-event
# generator and a Spark Structured Streaming job). The broker keeps running after the
# demo prints its results; stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/odradek demo "$@"
