#!/usr/bin/env bash
# make test: start the real services, run the whole pytest suite, stop the services even on failure.
# pytest's exit code is the result (5 = no tests collected is a failure, not hidden).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ALD=.venv/bin/aldebaran

stop() { "$ALD" services down || true; }
trap 'stop; exit 130' INT TERM

t0=$(date +%s)
if ! "$ALD" services up; then
  echo "make test: services failed to start (logs under .run/logs)" >&2
  stop
  exit 1
fi
echo "make test: services up in $(( $(date +%s) - t0 ))s"

.venv/bin/pytest --durations=25 --junitxml=.run/pytest-junit.xml "$@"  # every test's time, for the 20-minute budget
rc=$?
stop
if [ "$rc" -eq 5 ]; then
  echo "make test: pytest collected no tests (exit 5) — that is a failure" >&2
fi
echo "make test: pytest exit code $rc, total $(( $(date +%s) - t0 ))s"
exit "$rc"
