#!/usr/bin/env bash
# Installs everything (system packages, venv, test dependencies) and runs the whole suite:
# ruff, then pytest (unit tests, and integration tests that start real brokers and drive
# them with confluent-kafka, kafka-python, aiokafka, kcat and Spark). Takes about 40 minutes
# on a 2-core machine, plus the installs. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
.venv/bin/ruff check src tests bench
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# One process: on 2 cores, two pytest-xdist workers (`-n 2 --dist loadgroup`, grouped by
# tests/conftest.py) finish in about 25 minutes instead of about 40, but the timing-bound
# cluster and docs tests then share the CPU with another worker's brokers and some fail.
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
