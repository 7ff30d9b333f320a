#!/usr/bin/env bash
# make setup — install everything Aldebaran needs, from nothing, idempotently.
#
# Everything downloaded or built lives under $ALDEBARAN_CACHE (default ~/.cache/aldebaran), keyed by
# version, so a second run (or a fresh clone on the same machine) only verifies:
#   wheels/<hash of pins+python>/                      a wheel of every pin (and the build backend), shared by
#                                                      clones: the venv is installed from it offline, and so is
#                                                      tests/integration/test_install.py's fresh `pip install .`
#   venv/<hash of pins+python+tree path>/             Python virtualenv with the pins; .venv links to it
#                                                      (its `wheelhouse` links to the wheels above)
#   runtimes/<name>-<hash of its pins+python>/         a Spark job runtime of its own (setup/runtimes/*.txt):
#                                                      pyspark 4.3 apart from the control venv's 4.2 (issue 19)
#   jars/<pom name>-<hash of the pom>/                  Maven-resolved jar sets (setup/maven/*.xml)
#   minio/<version>/bin/minio                          MinIO server built with `go install`
#   alertmanager/<version>/bin/alertmanager            Prometheus Alertmanager built with `go install` (the
#                                                      alertmanager channel's local service and its test)
#
# `setup.sh --ha` (make setup-ha) adds what only the HA profile needs: psycopg2 in the venv
# (requirements-ha.txt) and Debian's `postgresql` and `haproxy` packages (apt-get, as root, only if absent).
#
# Progress: each step prints "[i/N] name", and its time and the total when it ends. While a step runs
# (a cold pip install, Maven resolve or Go build takes minutes), a line every $ALDEBARAN_SETUP_TICK
# seconds (default 30) says it is still going; steps that find their result cached skip the work.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ALDEBARAN_CACHE:-$HOME/.cache/aldebaran}"
PYTHON="${PYTHON:-python3}"
MINIO_MODULE="github.com/minio/minio"
ALERTMANAGER_PACKAGE="github.com/prometheus/alertmanager/cmd/alertmanager"
# shellcheck source=../setup/versions.env
source "$ROOT/setup/versions.env"
MAVEN_SETS=(kafka-broker spark-kafka spark-s3a)

TICK="${ALDEBARAN_SETUP_TICK:-30}"
HA=0
for arg in "$@"; do
  case "$arg" in
    --ha) HA=1 ;;
    *) echo "setup: unknown argument $arg (only --ha)" >&2; exit 2 ;;
  esac
done
STEPS=$((6 + HA))  # the step calls at the end of this script

mkdir -p "$CACHE"
total_start=$EPOCHREALTIME
step_n=0
ticker=""

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { s = int(b - a + 0.5); printf "%d:%02d", s / 60, s % 60 }'; }

stop_ticker() { if [ -n "$ticker" ]; then kill "$ticker" 2>/dev/null || true; ticker=""; fi; }

step() {  # step NAME CMD... — run CMD as step i of $STEPS: say so, say it is still going, time it
  local name="$1"; shift
  local t0=$EPOCHREALTIME
  step_n=$((step_n + 1))
  printf '==> [%d/%d] %s\n' "$step_n" "$STEPS" "$name"
  # A line every $TICK s while the step runs. The ticker also ends once this script has gone (a failed
  # step exits under set -e), seen with kill -0: an EXIT trap killing it makes bash 5.2 print
  # "wait_for: No record of process".
  ( while sleep "$TICK" && kill -0 "$$" 2>/dev/null; do
      printf '    … %s: still running, %s\n' "$name" "$(since "$t0")"; done ) &
  ticker=$!
  "$@"
  stop_ticker
  printf '    %s: done in %s (total %s)\n' "$name" "$(since "$t0")" "$(since "$total_start")"
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

wheelhouse_dir() {  # the wheel directory of these pins and this interpreter
  echo "$CACHE/wheels/$(short_hash "$ROOT/requirements.txt" "$ROOT/constraints.txt" <("$PYTHON" -V))"
}

fill_wheelhouse() {  # fill_wheelhouse PIP — a wheel of every pin (pyspark is an sdist: built once, here)
  local pip="$1" dir tmp
  dir=$(wheelhouse_dir)
  if [ -f "$dir/.complete" ]; then
    echo "    wheels cached: $dir ($(ls "$dir" | grep -c '\.whl$') wheels)"
    return
  fi
  echo "    pip wheel of requirements.txt with constraints.txt into $dir (~20 s with a warm pip cache)"
  tmp="$dir.tmp.$$"; rm -rf "$tmp"
  # setuptools and wheel: the build backend of pyproject.toml, for an isolated `pip install .` offline.
  "$pip" wheel --quiet --progress-bar off --wheel-dir "$tmp" -r "$ROOT/requirements.txt" -c "$ROOT/constraints.txt" \
    "setuptools>=65" wheel
  touch "$tmp/.complete"; rm -rf "$dir"; mv "$tmp" "$dir"
  echo "    $(ls "$dir" | grep -c '\.whl$') wheels, $(du -sh "$dir" | cut -f1)"
}

python_venv() {
  local key dir wheels
  # Keyed by the pins, the interpreter and this work tree's path: the venv holds an editable
  # install of this tree, so two clones on one machine must not share (and steal) one venv.
  # The wheelhouse is shared, so a second clone's venv takes ~1 min and no download.
  key=$(short_hash "$ROOT/requirements.txt" "$ROOT/constraints.txt" <(echo "$("$PYTHON" -V) $(realpath "$ROOT")"))
  dir="$CACHE/venv/$key"
  wheels=$(wheelhouse_dir)
  if [ -f "$dir/.complete" ] && "$dir/bin/python" -c 'import sys' 2>/dev/null; then
    echo "    cached: $dir"
    fill_wheelhouse "$dir/bin/pip"  # a venv older than the wheelhouse: the install test needs it
  else
    echo "    creating $dir (pip install of requirements.txt with constraints.txt from the wheelhouse; ~3 min cold)"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/pip" install --quiet --upgrade pip setuptools wheel
    fill_wheelhouse "$dir/bin/pip"
    "$dir/bin/pip" install --quiet --progress-bar off --no-index --find-links "$wheels" \
      -r "$ROOT/requirements.txt" -c "$ROOT/constraints.txt"
    touch "$dir/.complete"
  fi
  ln -sfn "$wheels" "$dir/wheelhouse"
  ln -sfn "$dir" "$ROOT/.venv"
  # Editable install of this work tree (cheap), redone when the venv points at another clone or when
  # the package's metadata would change: pyproject.toml, setup.py (entry points) or the packages present.
  local here stamp
  here=$("$ROOT/.venv/bin/python" -c 'import aldebaran, os; print(os.path.realpath(os.path.dirname(aldebaran.__file__)))' 2>/dev/null || true)
  stamp=$(short_hash "$ROOT/pyproject.toml" "$ROOT/setup.py" <(cd "$ROOT/include" && ls -- */__init__.py && realpath "$ROOT"))
  if [ "$here" != "$(realpath "$ROOT/include/aldebaran")" ] || [ "$(cat "$dir/.editable" 2>/dev/null)" != "$stamp" ]; then
    echo "    installing aldebaran (editable) from $ROOT"
    "$ROOT/.venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$ROOT"
    echo "$stamp" > "$dir/.editable"
  else
    echo "    aldebaran importable from $ROOT/include (metadata current)"
  fi
}

spark_runtimes() {
  # A job runtime is a venv with only what a Spark entry script needs (its own pyspark and SPARK_HOME);
  # the product is imported from the work tree (PYTHONPATH, aldebaran.spark.spark_env), so one runtime
  # serves every clone: keyed by its pins and the interpreter, not by the tree.
  local req name key dir
  for req in "$ROOT"/setup/runtimes/*.txt; do
    name=$(basename "$req" .txt)
    key=$(short_hash "$req" <("$PYTHON" -V))
    dir="$CACHE/runtimes/$name-$key"
    if [ -f "$dir/.complete" ] && "$dir/bin/python" -c 'import pyspark' 2>/dev/null; then
      echo "    cached: $name $dir"
      continue
    fi
    echo "    creating $name runtime $dir (pip install of $(basename "$req"); ~30 s cold)"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/pip" install --quiet --upgrade pip
    "$dir/bin/pip" install --quiet --progress-bar off -r "$req"
    touch "$dir/.complete"
    echo "    $name: pyspark $("$dir/bin/python" -c 'import pyspark; print(pyspark.__version__)')"
  done
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

platform_jar() {
  # The platform's own JVM classes (include/aldebaran/jvm: the checkpoint file manager), compiled against
  # pyspark's and the s3a jars into $CACHE/jars/aldebaran-jvm-<hash of the sources>/.
  echo "    $("$ROOT/.venv/bin/python" -c 'from aldebaran import spark; print(spark.connector_jars(s3a=True)[-1])')"
}

minio_server() {
  local dir="$CACHE/minio/$MINIO_VERSION/bin"
  if [ -x "$dir/minio" ]; then
    echo "    cached: $dir/minio"
    return
  fi
  echo "    go install $MINIO_MODULE@$MINIO_VERSION (a large build: ~6 min on 2 cores)"
  mkdir -p "$dir"
  # Go names every module it downloads (~250 lines): count them instead, a line per 50.
  GOBIN="$dir" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$MINIO_MODULE@$MINIO_VERSION" 2>&1 | awk '
    /^go: downloading / { if (++n % 50 == 0) printf "    go: %d modules downloaded\n", n; fflush(); next }
    { print; fflush() }
    END { if (n % 50) printf "    go: %d modules downloaded\n", n }'
  "$dir/minio" --version | head -1
}

alertmanager_server() {
  local dir="$CACHE/alertmanager/$ALERTMANAGER_VERSION/bin"
  if [ -x "$dir/alertmanager" ]; then
    echo "    cached: $dir/alertmanager"
    return
  fi
  echo "    go install $ALERTMANAGER_PACKAGE@$ALERTMANAGER_VERSION (~1 min on 2 cores)"
  mkdir -p "$dir"
  GOBIN="$dir" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$ALERTMANAGER_PACKAGE@$ALERTMANAGER_VERSION" 2>&1 | awk '
    /^go: downloading / { n++; next }
    { print; fflush() }
    END { printf "    go: %d modules downloaded\n", n }'
  "$dir/alertmanager" --version 2>&1 | head -1
}

ha_extras() {
  if "$ROOT/.venv/bin/python" -c 'import psycopg2, asyncpg' 2>/dev/null; then
    echo "    psycopg2, asyncpg in the venv"
  else
    echo "    pip install -r requirements-ha.txt"
    "$ROOT/.venv/bin/pip" install --quiet --progress-bar off -r "$ROOT/requirements-ha.txt" -c "$ROOT/constraints.txt"
  fi
  local packages=()
  if compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
    echo "    postgres: $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
  else
    packages+=(postgresql)
  fi
  # The one S3 endpoint of the profile's clients: HAProxy in front of the MinIO nodes.
  if command -v haproxy >/dev/null; then
    echo "    haproxy: $(command -v haproxy)"
  else
    packages+=(haproxy)
  fi
  [ "${#packages[@]}" -eq 0 ] && return
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: the HA profile needs Debian's packages: sudo apt-get install ${packages[*]}" >&2
    exit 1
  fi
  # The profile runs its own servers under the run directory: keep Debian from creating (and starting) its
  # default cluster on port 5432 as the package installs.
  if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
  fi
  echo "    apt-get install ${packages[*]} (Debian's packages)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confold "${packages[@]}" >/dev/null
}

step "tools" check_tools
step "python venv" python_venv
step "spark runtimes" spark_runtimes
step "maven jars" maven_jars
step "platform jar" platform_jar
step "minio" minio_server
step "alertmanager" alertmanager_server
if [ "$HA" -eq 1 ]; then step "ha extras: psycopg2, asyncpg, postgresql, haproxy" ha_extras; fi
echo "==> setup complete in $(since "$total_start") (cache: $CACHE)"
