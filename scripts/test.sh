#!/usr/bin/env bash
# make test: start the real services, run the whole pytest suite, stop the services even on failure.
# pytest's exit code is the result (5 = no tests collected is a failure, not hidden).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ALD=.venv/bin/aldebaran

stop() { "$ALD" services down || true; }
trap 'stop; exit 130' INT TERM

t0=$(date +%s)
# The suite's Spark drivers, the services' tasks included: the JIT's first tier, the serial collector and a
# class-data archive of Spark's classes, built once per JDK and pyspark (aldebaran_lab.spark_cds, ~40 s).
if [ -z "${SPARK_SUBMIT_OPTS:-}" ]; then
  SPARK_SUBMIT_OPTS="$(.venv/bin/python -m aldebaran_lab.spark_cds)"
  export SPARK_SUBMIT_OPTS
fi
if ! "$ALD" services up; then
  echo "make test: services failed to start (logs under .run/logs)" >&2
  stop
  exit 1
fi
echo "make test: services up in $(( $(date +%s) - t0 ))s"

# Two phases. First everything that keeps to its own topics, prefixes and processes, on TEST_WORKERS pytest-xdist
# workers (default 2, one per core: with 3, two clean-clone runs each failed a timing-sensitive test, see
# docs/operations.md; a file's tests stay on one worker, so a module's fixture is built once). Then the few that use the platform's shared state (marker `serial`, tests/conftest.py), alone.
# Every test's time is kept (junit XML): the next run orders its files by it (tests/schedule.py).
workers=${TEST_WORKERS:-2}
t1=$(date +%s)
.venv/bin/pytest -n "$workers" --dist loadfile -m "not campaign and not ha and not serial" \
  --durations=25 --junitxml=.run/pytest-junit.xml "$@"
rc1=$?
echo "make test: phase 1 ($workers workers) pytest exit code $rc1 in $(( $(date +%s) - t1 ))s"
t2=$(date +%s)
.venv/bin/pytest -m "serial and not campaign and not ha" --durations=10 --junitxml=.run/pytest-junit-serial.xml "$@"
rc2=$?
echo "make test: phase 2 (serial) pytest exit code $rc2 in $(( $(date +%s) - t2 ))s"
stop
# 5 = this phase collected no tests: fine when the other ran some (a PYTEST_ARGS selection), a failure when
# neither did.
if [ "$rc1" -eq 5 ] && [ "$rc2" -eq 5 ]; then
  echo "make test: pytest collected no tests (exit 5) — that is a failure" >&2
  rc=5
elif [ "$rc1" -eq 5 ]; then rc=$rc2
elif [ "$rc2" -eq 5 ]; then rc=$rc1
elif [ "$rc1" -ne 0 ]; then rc=$rc1
else rc=$rc2
fi
echo "make test: pytest exit code $rc, total $(( $(date +%s) - t0 ))s"
exit "$rc"
