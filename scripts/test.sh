#!/usr/bin/env bash
# Installs everything (system packages, venv, test dependencies) and runs the whole suite:
# ruff, then pytest (unit tests, and integration tests that start real brokers and drive
# them with confluent-kafka, kafka-python, aiokafka, kcat and Spark). Takes 6-10 minutes on
# a 2-core machine, installs included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
.venv/bin/ruff check src tests bench
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# Two workers (pytest-xdist): most integration tests wait on subprocesses, ZooKeeper
# sessions and timeouts rather than on the CPU. Each file stays on one worker, and so do all
# Spark tests (tests/conftest.py groups them).
exec .venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadgroup "$@"
