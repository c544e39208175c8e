#!/usr/bin/env bash
# Installs everything odradek needs on a fresh Debian machine, idempotently.
#   scripts/install.sh          system packages for the demo (a JRE for Spark) + the package with Spark
#   scripts/install.sh --test   also kcat, redis-server, zookeeper, nftables and the test dependencies
# Re-running it is cheap: apt and pip skip what is already there. What is checked is what
# odradek needs (a Java 17+ on PATH for Spark 4), not which package provides it, so a JDK
# installed another way (SDKMAN, a tarball, another distribution's package) is used as is.
# Sourcing the script (`. scripts/install.sh`) only defines its functions, for tests.

MIN_JAVA=17  # Spark 4 runs on Java 17 or later

# Prints the feature version of the `java` on PATH (8 for "1.8.0_292", 17 for "17.0.15",
# 21 for "21"), or nothing if there is no java or its version cannot be read.
java_major_version() {
  command -v java >/dev/null 2>&1 || return 0
  local line version
  # `java -version` writes to stderr, e.g.: openjdk version "17.0.15" 2025-04-15
  line=$(java -version 2>&1 | grep -m1 -E 'version "[^"]+"') || return 0
  version=${line#*version \"}
  version=${version%%\"*}
  if [[ $version == 1.* ]]; then
    version=${version#1.}  # Java 8 and older: 1.8.0_292 -> 8
  fi
  version=${version%%[!0-9]*}
  [[ -n $version ]] && echo "$version"
  return 0
}

# Succeeds when the java on PATH is at least MIN_JAVA.
have_java() {
  local major
  major=$(java_major_version)
  [[ -n $major ]] && (( major >= MIN_JAVA ))
}

# Prints the Debian packages odradek needs that nothing on this machine provides yet:
# a JRE only when no Java 17+ is on PATH. $1 is 1 with --test.
wanted_packages() {
  # gcc + python3-dev build the optional C record walks (odradek/records/_walk.c).
  local packages=(python3-venv gcc python3-dev)
  have_java || packages+=(default-jre-headless)
  # zookeeper (pulls a JRE) for the cluster tests, nftables for their network faults,
  # chromium + chromium-driver for the console's browser tests
  (( ${1:-0} )) && packages+=(kcat redis-server zookeeper nftables chromium chromium-driver)
  echo "${packages[@]}"
}

main() {
  set -euo pipefail
  cd "$(dirname "${BASH_SOURCE[0]}")/.."

  local want_test=0
  [[ "${1:-}" == "--test" ]] && want_test=1

  local apt_packages
  read -r -a apt_packages <<<"$(wanted_packages "$want_test")"
  have_java && echo "using $(command -v java) (Java $(java_major_version))"

  local missing=() pkg
  for pkg in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if (( ${#missing[@]} )); then
    local sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    echo "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if ! have_java; then
    local found
    found=$(java_major_version)
    echo "error: Spark needs Java ${MIN_JAVA} or later on PATH; found ${found:+Java }${found:-none}" >&2
    return 1
  fi

  local python=${PYTHON:-python3}
  if [[ ! -x .venv/bin/python ]]; then
    "$python" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  if (( want_test )); then
    .venv/bin/python -m pip install -q -e '.[spark,console,test]'
  else
    .venv/bin/python -m pip install -q -e '.[spark]'
  fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
