#!/usr/bin/env bash
# make setup — install everything Aldebaran needs, from nothing, idempotently.
#
# Everything downloaded or built lives under $ALDEBARAN_CACHE (default ~/.cache/aldebaran), keyed by
# version, so a second run (or a fresh clone on the same machine) only verifies:
#   venv/<hash of pins+python+tree path>/             Python virtualenv with the pins; .venv links to it
#   jars/<pom name>-<hash of the pom>/                  Maven-resolved jar sets (setup/maven/*.xml)
#   minio/<version>/bin/minio                          MinIO server built with `go install`
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ALDEBARAN_CACHE:-$HOME/.cache/aldebaran}"
PYTHON="${PYTHON:-python3}"
MINIO_MODULE="github.com/minio/minio"
# shellcheck source=../setup/versions.env
source "$ROOT/setup/versions.env"
MAVEN_SETS=(kafka-broker spark-kafka spark-s3a)

mkdir -p "$CACHE"
total_start=$(date +%s)

step() {  # step NAME CMD... — run CMD, print its duration
  local name="$1"; shift
  local t0=$EPOCHREALTIME
  printf '==> %s\n' "$name"
  "$@"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v n="$name" 'BEGIN { printf "    %s: %.1fs\n", n, b - a }'
}

short_hash() { cat "$@" | sha256sum | cut -c1-12; }

check_tools() {
  local missing=()
  for t in "$PYTHON" java mvn go; do command -v "$t" >/dev/null || missing+=("$t"); done
  if ((${#missing[@]})); then
    echo "setup: missing tools: ${missing[*]} (need Python 3.11+, JDK 17+, Maven, Go)" >&2; exit 1
  fi
  local jv; jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  if [ "${jv:-0}" -lt 17 ]; then echo "setup: Java 17+ required, found ${jv:-none}" >&2; exit 1; fi
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || { echo "setup: Python 3.11+ required ($PYTHON)" >&2; exit 1; }
  echo "    python $("$PYTHON" -c 'import platform; print(platform.python_version())'), java $jv, $(mvn -B -v 2>/dev/null | head -1 | sed "s/\x1b\[[0-9;]*m//g"), $(go version)"
}

python_venv() {
  local key dir
  # Keyed by the pins, the interpreter and this work tree's path: the venv holds an editable
  # install of this tree, so two clones on one machine must not share (and steal) one venv.
  # pip's own download cache is shared, so a second clone's venv takes ~100 s, not ~3 min.
  key=$(short_hash "$ROOT/requirements.txt" "$ROOT/constraints.txt" <(echo "$("$PYTHON" -V) $(realpath "$ROOT")"))
  dir="$CACHE/venv/$key"
  if [ -f "$dir/.complete" ] && "$dir/bin/python" -c 'import sys' 2>/dev/null; then
    echo "    cached: $dir"
  else
    echo "    creating $dir (pip install of requirements.txt with constraints.txt; ~3 min cold)"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/pip" install --quiet --upgrade pip setuptools wheel
    "$dir/bin/pip" install --quiet --progress-bar off -r "$ROOT/requirements.txt" -c "$ROOT/constraints.txt"
    touch "$dir/.complete"
  fi
  ln -sfn "$dir" "$ROOT/.venv"
  # Editable install of this work tree (cheap; redone only when the venv points at another clone).
  local here
  here=$("$ROOT/.venv/bin/python" -c 'import aldebaran, os; print(os.path.realpath(os.path.dirname(aldebaran.__file__)))' 2>/dev/null || true)
  if [ "$here" != "$(realpath "$ROOT/include/aldebaran")" ]; then
    echo "    installing aldebaran (editable) from $ROOT"
    "$ROOT/.venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$ROOT"
  else
    echo "    aldebaran importable from $ROOT/include"
  fi
}

maven_jars() {
  local name key dir tmp
  for name in "${MAVEN_SETS[@]}"; do
    key=$(short_hash "$ROOT/setup/maven/$name.xml")
    dir="$CACHE/jars/$name-$key"
    if [ -f "$dir/.complete" ]; then
      echo "    cached: $name ($(ls "$dir" | grep -c '\.jar$') jars) $dir"
      continue
    fi
    echo "    resolving $name from Maven Central"
    tmp="$dir.tmp.$$"; rm -rf "$tmp"
    mvn --batch-mode --quiet -Dstyle.color=never -s "$ROOT/setup/maven/settings.xml" -f "$ROOT/setup/maven/$name.xml" \
      dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime
    touch "$tmp/.complete"; rm -rf "$dir"; mv "$tmp" "$dir"
    echo "    $name: $(ls "$dir" | grep -c '\.jar$') jars, $(du -sh "$dir" | cut -f1)"
  done
}

minio_server() {
  local dir="$CACHE/minio/$MINIO_VERSION/bin"
  if [ -x "$dir/minio" ]; then
    echo "    cached: $dir/minio"
    return
  fi
  echo "    go install $MINIO_MODULE@$MINIO_VERSION (a large build: ~6 min on 2 cores)"
  mkdir -p "$dir"
  GOBIN="$dir" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$MINIO_MODULE@$MINIO_VERSION"
  "$dir/minio" --version | head -1
}

step "tools" check_tools
step "python venv" python_venv
step "maven jars" maven_jars
step "minio" minio_server
echo "==> setup complete in $(( $(date +%s) - total_start ))s (cache: $CACHE)"
