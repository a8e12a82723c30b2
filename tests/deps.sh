#!/usr/bin/env bash
# What the test suite needs from the machine besides the virtualenv (`make deps`; `make test` runs
# it first, so a fresh clone needs nothing installed by hand):
#   postgresql-15             Debian's Postgres 15, the suite's second version (18 comes from a wheel)
#   maven, a JDK 17           Maven fetches the JVM servers the tests start (Apache Kafka, the Schema
#                             Registry, Spark's connectors, HDFS, Debezium); they run on the JDK
#   prometheus                promtool (alert rule tests) and the server of the scrape test
# Only what is missing is installed, with apt-get, as root; not root, it names the command to run
# and stops. Then Maven fetches the JVM servers once into ~/.cache/pgbridge/jvm (jvm/fetch.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

missing=()
need() {  # need PACKAGE COMMAND...: PACKAGE is missing unless COMMAND succeeds
  local package=$1
  shift
  if "$@" >/dev/null 2>&1; then
    echo "deps: $package present"
  else
    missing+=("$package")
  fi
}
need postgresql-15 test -x /usr/lib/postgresql/15/bin/postgres
need maven command -v mvn
need openjdk-17-jdk-headless sh -c 'java -version 2>&1 | grep -Eq "version \"(1[7-9]|[2-9][0-9])"'  # Java 17+
need prometheus sh -c 'command -v promtool && command -v prometheus'

if ((${#missing[@]})); then
  install=(apt-get install -y -q "${missing[@]}")
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing ${missing[*]}; as root run: apt-get update && ${install[*]}" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]} (apt-get, about 400 MB with a JDK)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${install[@]}"
fi

# The first time Maven downloads the JVM servers' jars (about 300 MB into ~/.cache/pgbridge/jvm and
# Maven's own ~/.m2): a few minutes. After that this prints the cached directories at once.
echo "deps: JVM servers (jvm/fetch.py; Maven downloads them the first time)"
"$python" jvm/fetch.py
