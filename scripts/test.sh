#!/usr/bin/env bash
# Installs everything (system packages, venv, test dependencies) and runs the whole suite:
# ruff, then pytest (unit tests and integration tests with a real broker, ZooKeeper,
# confluent-kafka, kafka-python, aiokafka, kcat and Spark).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
.venv/bin/ruff check src tests bench
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
