#!/usr/bin/env bash
# Installs everything (system packages, venv, test dependencies) and runs the whole suite:
# ruff, then pytest (unit tests, and integration tests that start real brokers and drive
# them with confluent-kafka, kafka-python, aiokafka, kcat and Spark). Extra arguments go
# to one serial pytest run instead (`bash scripts/test.sh tests/storage -x`).
#
# The whole suite runs in three steps, about 25 minutes on a 2-core machine (one serial
# run took about 40):
#   1. everything but the two files that need Kafka's default port 9092, on two
#      pytest-xdist workers (`--dist loadgroup`: tests/conftest.py keeps each file, the
#      Spark tests and the fault campaigns on one worker each);
#   2. those two files (the README's and docs/' commands, as a user types them), alone;
#   3. only if step 1 failed: its failed tests again, serially. A test that fails only
#      while another worker's brokers share the two cores is named in the output; one that
#      fails again fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
.venv/bin/ruff check src tests bench
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
pytest=(.venv/bin/python -m pytest)
if [ "$#" -gt 0 ]; then
    exec "${pytest[@]}" -p no:cacheprovider "$@"
fi

default_port_files=(tests/docs/test_docs_examples.py tests/cli/test_readme_using_it.py)
cache_dir="$(mktemp -d "${TMPDIR:-/tmp}/odradek-pytest-cache.XXXXXX")"
trap 'rm -rf "$cache_dir"' EXIT

parallel=0
"${pytest[@]}" -o cache_dir="$cache_dir" -n 2 --dist loadgroup \
    "${default_port_files[@]/#/--ignore=}" || parallel=$?
serial=0
"${pytest[@]}" -p no:cacheprovider "${default_port_files[@]}" || serial=$?

if [ "$parallel" -eq 1 ]; then
    echo "== step 3: the tests that failed on two workers, again, one at a time =="
    parallel=0
    "${pytest[@]}" -o cache_dir="$cache_dir" -rA --last-failed --last-failed-no-failures none \
        || parallel=$?
fi
if [ "$parallel" -ne 0 ] || [ "$serial" -ne 0 ]; then
    echo "test suite failed (parallel part: exit $parallel, default-port part: exit $serial)"
    exit 1
fi
