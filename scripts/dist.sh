#!/usr/bin/env bash
# `make dist` (scripts/dist.sh [OUT_DIR]): the project's wheel and the packed runtime spark-submit ships to a
# cluster's workers, into dist/ (or OUT_DIR).
#   dist/aldebaran-<version>-py3-none-any.whl    the product (pip install it where the driver runs)
#   dist/aldebaran-runtime-py<X.Y>.tar.gz        a venv: the wheel (--no-deps) + setup/dist/executor.txt;
#                                                spark-submit --archives <it>#env, spark.pyspark.python=./env/bin/python
# Why a venv archive and not --py-files: the executors import native extensions (pyarrow, pydantic-core, msgspec,
# confluent-kafka), which Python cannot import from a zip. The venv is built from this venv's base interpreter:
# the workers need the same Python X.Y at the same path (a venv links to its interpreter; PySpark also requires
# the driver's and the workers' X.Y to match). Its paths are relative to its directory, so it runs wherever Spark
# unpacks it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
OUT="$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)"
[ -x "$PY" ] || { echo "no .venv: run \`make setup\` first" >&2; exit 1; }
BASE="$("$PY" -c 'import sys; print(sys._base_executable)')"
XY="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
BUILD="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$BUILD"' EXIT

echo "==> wheel (the product, include/aldebaran: the lab and the capacity package stay out, as in the image)"
rm -f "$OUT"/aldebaran-*.whl
# Built from a copy: setuptools writes build/ and *.egg-info beside its sources, and this tree is shared.
mkdir -p "$BUILD/src/include"
cp "$ROOT"/{pyproject.toml,setup.py,README.md} "$BUILD/src/"
tar -C "$ROOT/include" --exclude=__pycache__ --exclude='*.egg-info' -cf - aldebaran | tar -C "$BUILD/src/include" -xf -
# --no-build-isolation: setuptools from the venv (no index needed for the build backend)
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$OUT" "$BUILD/src"
WHEEL="$(ls "$OUT"/aldebaran-*.whl)"

echo "==> runtime venv (python $XY: $BASE)"
"$BASE" -m venv "$BUILD/env"
"$BUILD/env/bin/python" -m pip install --quiet --no-deps "$WHEEL"
# --no-warn-conflicts: the wheel went in --no-deps, so pip would list its Airflow pins as missing
"$BUILD/env/bin/python" -m pip install --quiet --no-warn-conflicts -r "$ROOT/setup/dist/executor.txt"
# pip and its caches are not needed on a worker
"$BUILD/env/bin/python" -m pip uninstall --quiet --yes pip
find "$BUILD/env" -name __pycache__ -type d -prune -exec rm -rf {} +
"$BUILD/env/bin/python" -c 'import aldebaran.audit.sparkjob.copartitioned, pyarrow, pyspark.worker'

ARCHIVE="$OUT/aldebaran-runtime-py$XY.tar.gz"
echo "==> $ARCHIVE"
tar -cf - -C "$BUILD/env" . | gzip -1 > "$ARCHIVE.tmp"  # -1: 3x faster than the default, a few MB larger
mv "$ARCHIVE.tmp" "$ARCHIVE"
ls -l "$WHEEL" "$ARCHIVE" | awk '{printf "    %s  %.1f MB\n", $NF, $5 / 1048576}'
echo "    ALDEBARAN_SPARK_RUNTIME_ARCHIVE=$ARCHIVE"
