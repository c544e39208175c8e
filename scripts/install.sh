#!/usr/bin/env bash
# Installs everything odradek needs on a fresh Debian machine, idempotently.
#   scripts/install.sh          system packages for the demo (a JRE for Spark) + the package with Spark
#   scripts/install.sh --test   also kcat, redis-server, zookeeper, nftables and the test dependencies
# Re-running it is cheap: apt and pip skip what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

# gcc + python3-dev build the optional C record walk (odradek/records/_walk.c).
apt_packages=(default-jre-headless python3-venv gcc python3-dev)
if (( want_test )); then
  # zookeeper (pulls a JRE) for the cluster tests, nftables for their network faults,
  # chromium + chromium-driver for the console's browser tests
  apt_packages+=(kcat redis-server zookeeper nftables chromium chromium-driver)
fi

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if (( ${#missing[@]} )); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if (( want_test )); then
  .venv/bin/python -m pip install -q -e '.[spark,console,test]'
else
  .venv/bin/python -m pip install -q -e '.[spark]'
fi
