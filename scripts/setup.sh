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
# Alertmanager is built only when needed: `--with-alertmanager` or ALDEBARAN_SETUP_ALERTMANAGER=1 (make test,
# the benchmarks), or a configured channel / on-call target of kind alertmanager on this machine.
# At its end setup prunes the cache entries no live checkout uses (aldebaran_lab.cache_prune; --no-prune
# skips it; `make clean-cache` runs it alone).
#
# Steps that do not depend on each other run at once (the venv, the Spark runtimes, the Maven sets, the Go
# builds); the platform jar waits for the venv and the jars. Each step's output goes to its log and is shown
# when it ends; while steps run, a line per step every $ALDEBARAN_SETUP_TICK seconds (default 30) says it is
# still going. A failing step fails setup with its name and the end of its log, and stops the others. The
# end prints a breakdown: each step's seconds and whether it found its result cached or built it.
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
WITH_AM="${ALDEBARAN_SETUP_ALERTMANAGER:-0}"
PRUNE=1
for arg in "$@"; do
  case "$arg" in
    --ha) HA=1 ;;
    --with-alertmanager) WITH_AM=1 ;;
    --no-prune) PRUNE=0 ;;
    *) echo "setup: unknown argument $arg (--ha, --with-alertmanager, --no-prune)" >&2; exit 2 ;;
  esac
done

mkdir -p "$CACHE"
total_start=$EPOCHREALTIME
LOGDIR=$(mktemp -d -t aldebaran-setup.XXXXXX)

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { s = int(b - a + 0.5); printf "%d:%02d", s / 60, s % 60 }'; }
secs() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# --- the step runner: each step a background job with its own log, rc file and state file ----------------
declare -A PID T0 SECS RESULT
ORDER=()
file_of() { printf '%s/%s.%s' "$LOGDIR" "${1// /_}" "$2"; }
built() { echo built > "$STATE"; }  # a step calls it when it did work (else its result reads "cached")

launch() {  # launch NAME FUNCTION — start a step in the background
  local name="$1" fn="$2"
  ORDER+=("$name"); T0[$name]=$EPOCHREALTIME
  printf '==> %s: started\n' "$name"
  # errexit inside the step's subshell, not around it: a failing command ends the step, and its status is
  # written (under `a && b || c` bash would ignore errexit inside the subshell too).
  { set +e; ( set -e; STATE=$(file_of "$name" state); "$fn" ) >"$(file_of "$name" log)" 2>&1
    echo $? > "$(file_of "$name" rc)"; } &
  PID[$name]=$!
}

kill_tree() {  # kill_tree PID — a step's job and everything it started (mvn, go, pip), by process id
  local child children
  children=$(pgrep -P "$1" 2>/dev/null || true)
  kill "$1" 2>/dev/null || true  # the parent first: a step's wrapper must not outlive its step to write its rc
  for child in $children; do kill_tree "$child"; done
}

abort() {
  local name
  for name in "${!PID[@]}"; do kill_tree "${PID[$name]}"; done
}
trap abort EXIT  # setup ending for any reason leaves no step behind
trap 'abort; echo "setup: interrupted" >&2; rm -rf "$LOGDIR"; exit 130' INT TERM

reap() {  # reap NAME — a step whose rc file exists: its result shown, or setup failed with its log's end
  local name="$1" rc
  rc=$(cat "$(file_of "$name" rc)")
  wait "${PID[$name]}" 2>/dev/null || true
  unset "PID[$name]"
  SECS[$name]="$(secs "${T0[$name]}")s"
  if [ "$rc" -ne 0 ]; then
    abort
    printf 'setup: step "%s" failed (exit %s) after %ss; the end of its log (%s):\n' "$name" "$rc" \
      "${SECS[$name]%s}" "$(file_of "$name" log)" >&2
    tail -n 40 "$(file_of "$name" log)" | sed 's/^/    | /' >&2
    exit "$rc"
  fi
  RESULT[$name]=$(cat "$(file_of "$name" state)" 2>/dev/null || echo cached)
  printf '==> %s: done in %s, %s (total %s)\n' "$name" "$(since "${T0[$name]}")" "${RESULT[$name]}" "$(since "$total_start")"
  cat "$(file_of "$name" log)"
}

await() {  # await NAME... — until these steps have ended (none named: all); reaps any step that ends
  local next=$((EPOCHSECONDS + TICK)) name pending last
  while :; do
    for name in "${!PID[@]}"; do [ -s "$(file_of "$name" rc)" ] && reap "$name"; done
    pending=0
    if [ "$#" -eq 0 ]; then pending=${#PID[@]}; else for name in "$@"; do [ -n "${PID[$name]:-}" ] && pending=1; done; fi
    [ "$pending" -eq 0 ] && return 0
    if [ "$EPOCHSECONDS" -ge "$next" ]; then
      for name in "${ORDER[@]}"; do
        [ -n "${PID[$name]:-}" ] || continue
        last=$(tail -n 1 "$(file_of "$name" log)" 2>/dev/null | sed 's/^ *//' | cut -c1-100)
        printf '    … %s: still running, %s%s\n' "$name" "$(since "${T0[$name]}")" "${last:+ (last: $last)}"
      done
      next=$((EPOCHSECONDS + TICK))
    fi
    sleep 0.5
  done
}

skip() {  # skip NAME REASON — a step not run, in the breakdown
  ORDER+=("$1"); SECS[$1]="-"; RESULT[$1]="skipped: $2"
  printf '==> %s: skipped (%s)\n' "$1" "$2"
}

breakdown() {
  local name
  echo "==> setup complete in $(since "$total_start") (cache: $CACHE); per step:"
  for name in "${ORDER[@]}"; do printf '    %-16s %8s  %s\n' "$name" "${SECS[$name]}" "${RESULT[$name]}"; done
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
  built
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
    built
    echo "    creating $dir (pip install of requirements.txt with constraints.txt from the wheelhouse; ~3 min cold)"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    realpath "$ROOT" > "$dir/.tree"  # whose venv it is: the prune keeps it while that tree lives
    "$dir/bin/pip" install --quiet --upgrade pip setuptools wheel
    fill_wheelhouse "$dir/bin/pip"
    "$dir/bin/pip" install --quiet --progress-bar off --no-index --find-links "$wheels" \
      -r "$ROOT/requirements.txt" -c "$ROOT/constraints.txt"
    touch "$dir/.complete"
  fi
  [ -f "$dir/.tree" ] || realpath "$ROOT" > "$dir/.tree"  # a venv older than .tree
  ln -sfn "$wheels" "$dir/wheelhouse"
  ln -sfn "$dir" "$ROOT/.venv"
  # Editable install of this work tree (cheap), redone when the venv points at another clone or when
  # the package's metadata would change: pyproject.toml, setup.py (entry points) or the packages present.
  local here stamp
  here=$("$ROOT/.venv/bin/python" -c 'import aldebaran, os; print(os.path.realpath(os.path.dirname(aldebaran.__file__)))' 2>/dev/null || true)
  stamp=$(short_hash "$ROOT/pyproject.toml" "$ROOT/setup.py" <(cd "$ROOT/include" && ls -- */__init__.py && realpath "$ROOT"))
  if [ "$here" != "$(realpath "$ROOT/include/aldebaran")" ] || [ "$(cat "$dir/.editable" 2>/dev/null)" != "$stamp" ]; then
    built
    echo "    installing aldebaran (editable) from $ROOT"
    "$ROOT/.venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$ROOT"
    echo "$stamp" > "$dir/.editable"
  else
    echo "    aldebaran importable from $ROOT/include (metadata current)"
  fi
}

spark_runtimes() {
  # A job runtime is a venv with only what a Spark entry script needs (its own pyspark and SPARK_HOME);
  # the product is imported from the work tree (PYTHONPATH, aldebaran.runtime.spark.spark_env), so one runtime
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
    built
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
    built
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
  local jar
  if ! compgen -G "$CACHE/jars/aldebaran-jvm-$(jvm_key)/aldebaran-jvm.jar" >/dev/null; then built; fi
  jar=$("$ROOT/.venv/bin/python" -c 'from aldebaran.runtime import spark; print(spark.connector_jars(s3a=True)[-1])')
  echo "    $jar"
}

jvm_key() {  # the platform jar's key, as aldebaran.jvm names its directory
  "$ROOT/.venv/bin/python" -c 'from aldebaran import jvm; print(jvm._digest(sorted(jvm.SOURCES.glob("*.java"))))'
}

alertmanager_wanted() {  # whether a channel or on-call target configured here needs the local Alertmanager
  "$ROOT/.venv/bin/python" -c 'from aldebaran.runtime import envfile; envfile.load_env()
from aldebaran_lab.services import alertmanager as a; raise SystemExit(0 if a.wanted() else 1)' 2>/dev/null
}

prune_cache() {
  echo checked > "$STATE"  # its breakdown line: what it pruned is in its output
  "$ROOT/.venv/bin/python" -m aldebaran_lab.cache_prune --cache "$CACHE"
}

minio_server() {
  local dir="$CACHE/minio/$MINIO_VERSION/bin"
  if [ -x "$dir/minio" ]; then
    echo "    cached: $dir/minio"
    return
  fi
  built
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
  built
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
    built
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
  built
  echo "    apt-get install ${packages[*]} (Debian's packages)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confold "${packages[@]}" >/dev/null
}

launch "tools" check_tools
await "tools"
launch "python venv" python_venv
launch "spark runtimes" spark_runtimes
launch "maven jars" maven_jars
launch "minio" minio_server
if [ "$WITH_AM" = 1 ]; then launch "alertmanager" alertmanager_server; fi
await "python venv"
if [ "$WITH_AM" != 1 ]; then
  # Decided with the venv: the channel settings are read as `make up` reads them (.env, environment).
  if alertmanager_wanted; then launch "alertmanager" alertmanager_server
  else skip "alertmanager" "no channel or on-call target needs it; --with-alertmanager builds it"; fi
fi
if [ "$HA" -eq 1 ]; then launch "ha extras" ha_extras; fi
await "maven jars"
launch "platform jar" platform_jar
await
if [ "$PRUNE" -eq 1 ]; then launch "prune" prune_cache; await; else skip "prune" "--no-prune"; fi
rm -rf "$LOGDIR"
breakdown
