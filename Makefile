# Aldebaran — developer entry points. `make help` lists them.
SHELL := /bin/bash
VENV  := .venv
ALD   := $(VENV)/bin/aldebaran

.PHONY: help setup setup-ha up up-cluster up-ha down down-ha status status-ha demo test test-unit test-ha chaos chaos-short chaos-ha clean bench bench-quick setup-test clean-cache dist

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup:  ## install everything (venv, Kafka/Spark jars, MinIO; Alertmanager if a channel needs it) into ~/.cache/aldebaran, steps in parallel; idempotent; prunes what no checkout uses
	@bash scripts/setup.sh

setup-test:  ## setup, plus Alertmanager (the test suite and the dispatch benchmark run a real one)
	@bash scripts/setup.sh --with-alertmanager

clean-cache:  ## delete the cache entries (~/.cache) that no live checkout pins: old jar sets, runtimes, wheels, venvs of deleted clones; says what and how many MB
	@if [ -x $(VENV)/bin/python ]; then $(VENV)/bin/python -m aldebaran_lab.cache_prune; else echo "clean-cache: no .venv here: run make setup first" >&2; exit 1; fi

up: setup  ## start Kafka, MinIO and Airflow on 127.0.0.1 (credentials generated into .env)
	@$(ALD) services up

up-cluster: setup  ## also start a Spark standalone master and two workers
	@$(ALD) services up --cluster

setup-ha:  ## setup, plus what only the HA profile needs (psycopg2; Debian's postgresql and haproxy via apt if absent)
	@bash scripts/setup.sh --ha

up-ha: setup-ha  ## the HA profile: 3 Kafka brokers, 4 MinIO nodes, Airflow on Postgres (2 schedulers, 2 triggerers), Spark master + 2 workers
	@$(ALD) services up --ha

down-ha:  ## stop every member of the HA profile
	@if [ -x $(ALD) ]; then $(ALD) services down --ha; fi

status-ha:  ## one line per HA member, and the profile's resident memory
	@$(ALD) services status --ha

down:  ## stop every service started by `make up`
	@if [ -x $(ALD) ]; then $(ALD) services down; fi

status:  ## one line per service
	@$(ALD) services status

demo: setup  ## the platform end to end through Airflow on local defaults (leaves it running; `make down` stops all)
	@$(ALD) services up
	@$(ALD) demo

test: setup-test  ## the whole suite against real services (started, then stopped even on failure): two pytest-xdist workers (TEST_WORKERS), then the `serial` tests alone
	@bash scripts/test.sh $(PYTEST_ARGS)

test-unit: setup  ## only the fast tests: unit and DAG integrity (no services needed)
	@$(VENV)/bin/pytest tests/unit tests/dags -q $(PYTEST_ARGS)

# The deployed path twice: as `make demo` leaves it (the rest's target has no lane), with a lane rotation beside
# it; then with the lane enabled (its Airflow starts the fast dispatcher, its demo the lane) and a fast webhook.
bench: setup-test  ## capacity benchmarks, full size, the lane's tuning A/B, then the deployed path (the platform as `make demo` leaves it; tables + plots into docs/benchmarks.md, docs/img/)
	@$(ALD) bench all
	@$(ALD) bench lane-tuning --report
	@$(ALD) services up
	@$(ALD) bench deployed --start --rest-runs 3 --report
	@$(ALD) bench lane-rotation --rates 1000 --repeats 3 --report
	@$(ALD) services down
	@ALDEBARAN_LANES_ENABLED=true $(ALD) services up
	@ALDEBARAN_LANES_ENABLED=true $(ALD) bench deployed --start --rates 1000,10000 --runs 3 --rest-seconds 30 --no-capacity --webhook-batch 100 --with-lane --lane-only --fast-webhook --report

bench-quick: setup-test  ## every benchmark small (< 5 min), asserts correctness only (report under .run/bench/quick)
	@$(ALD) bench all --quick

chaos: setup  ## reliability campaigns, full size (~30 min; shared services up; tables into docs/reliability.md)
	@$(ALD) services up
	@$(ALD) chaos all $(CHAOS_ARGS)

test-ha: setup-ha  ## the HA profile in a private run dir: kill one member of each quorum (~3 min); then the short `chaos ha` (a broker and the active auditor killed under load, ~10 min)
	@$(VENV)/bin/pytest tests/integration/test_ha_profile.py tests/integration/test_chaos_ha.py -m ha $(PYTEST_ARGS)

chaos-short: setup-test  ## the short campaigns left out of `make test` (pytest marker `campaign`): Airflow scheduler/triggerer/api-server kills (private services), the under-load kill at 20k trades/s, warm failover vs cold restart, dispatcher failover, the supervisor's standby slot, the auditor killed on a standalone cluster (~25 min; starts the shared services, leaves them up)
	@$(ALD) services up
	@$(VENV)/bin/pytest tests/integration -m campaign --durations=25 $(PYTEST_ARGS)

chaos-ha: setup-ha  ## `aldebaran chaos ha` on the HA profile (started if down, left up): first the highest rate with no-fault trade → alert p99 ≤ 2 s, then one kill per component at it; detection, takeover and catch-up per fault into docs/reliability.md and docs/img/reliability-results.json (~30 min; on a quiet box)
	@$(ALD) services up --ha
	@$(ALD) chaos ha $(CHAOS_ARGS)

dist:  ## the wheel and the packed runtime spark-submit ships to a cluster's workers, into dist/ (docs/operations.md "Running on a cluster")
	@bash scripts/dist.sh

clean: down down-ha  ## stop services (core and HA) and delete local service data (.run)
	rm -rf .run
