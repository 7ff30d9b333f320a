# syntax=docker/dockerfile:1
#
# The Airflow image of the Aldebaran platform: used by `docker compose` (docker-compose.yml builds it
# for airflow-init, -api-server, -scheduler, -dag-processor and -triggerer) and by `astro dev start`.
# docs/docker.md explains how to run it.
#
# Base image: Astro Runtime 3 (Airflow 3.x). Airflow 3 Runtime images live at
# astrocrpublic.azurecr.io/runtime (quay.io/astronomer/astro-runtime holds the Airflow 2 line) and are
# tagged <airflow major.minor>-<runtime patch>[-python-<x.y>][-base]; 3.3-8 is an Airflow 3.3 build.
#
# Why the "-base" flavour and not the default one: the default image carries ONBUILD triggers that copy
# packages.txt and requirements.txt, install them, then copy the whole build context. That install step
# refuses any requirements.txt that pins `apache-airflow` ("change the base image instead"), and this
# project's requirements.txt pins apache-airflow==3.3.2 for the local venv. The -base flavour has no
# triggers, so the same steps are spelled out below, in the same order, minus the Airflow pin.
#
# Why python-3.11: it is the interpreter of the local venv that constraints.txt was resolved and
# tested with (scripts/setup.sh; the Runtime's default is 3.14). tests/unit/deploy/test_compose_env.py holds the
# tag's Python equal to the venv's and its Airflow minor equal to constraints.txt.

# --- stage 1: Spark connector jars --------------------------------------------------------------
# The auditor puts spark-sql-kafka (and hadoop-aws for s3a:// checkpoints) on spark.jars from
# $ALDEBARAN_CACHE/jars/<pom name>-<first 12 hex of the pom's sha256>/ (aldebaran.runtime.paths.jar_dir), the
# layout scripts/setup.sh creates. Resolve the same poms here so nothing is fetched at run time.
FROM maven:3.9-eclipse-temurin-17 AS connector-jars
WORKDIR /build
COPY setup/maven/ setup/maven/
RUN set -eu; \
    for name in spark-kafka spark-s3a; do \
      key="$(sha256sum "setup/maven/$name.xml" | cut -c1-12)"; \
      out="/jars/$name-$key"; \
      mvn --batch-mode --quiet -Dstyle.color=never -s setup/maven/settings.xml -f "setup/maven/$name.xml" \
        dependency:copy-dependencies -DoutputDirectory="$out" -DincludeScope=runtime; \
      touch "$out/.complete"; \
    done

# --- stage 2: the Airflow image -----------------------------------------------------------------
FROM astrocrpublic.azurecr.io/runtime:3.3-8-python-3.11-base

WORKDIR /usr/local/airflow
USER root

# OS packages: packages.txt, one apt package a line (Astro's convention; `#` starts a comment).
# It holds the Java runtime Spark needs (the pyspark wheel's spark-submit launches a JVM). The man1
# directory is created because slim Debian images lack it and some JRE post-install scripts link into it.
COPY packages.txt ./
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    sed -e 's/#.*//' packages.txt | tr -s ' \t\r' '\n' | xargs --no-run-if-empty \
      apt-get install -y --no-install-recommends; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java

# Python packages: requirements.txt without its apache-airflow pin (the base image *is* Airflow, its
# tag is the Airflow version), installed with constraints.txt, the transitive versions the local venv
# was tested with. First the build checks that the Runtime's Airflow is the one constraints.txt pins
# (a Runtime tag of another Airflow patch fails here, naming both, instead of pip replacing Airflow
# underneath the Runtime); the image's own Airflow distributions are passed as constraints too.
COPY requirements.txt constraints.txt ./
RUN set -eu; \
    image_airflow="$(python -c 'import airflow; print(airflow.__version__)')"; \
    pinned_airflow="$(sed -n 's/^apache-airflow-core==//p' constraints.txt)"; \
    if [ "$image_airflow" != "$pinned_airflow" ]; then \
      echo "the base image has Airflow $image_airflow, constraints.txt pins $pinned_airflow: use the Runtime tag of Airflow $pinned_airflow" >&2; \
      exit 1; \
    fi; \
    pip list --format=freeze | grep -iE '^apache-airflow(-core|-task-sdk)?==' > /tmp/airflow-pins.txt; \
    grep -vE '^[[:space:]]*apache-airflow[[:space:]]*[=<>~!]' requirements.txt > /tmp/requirements-image.txt; \
    pip install --no-cache-dir --root-user-action=ignore \
      -r /tmp/requirements-image.txt -c constraints.txt -c /tmp/airflow-pins.txt; \
    rm -f /tmp/airflow-pins.txt /tmp/requirements-image.txt

# The project. A bind mount of the build context instead of `COPY . .`: only the parts below reach the
# image (never .env, .venv or .run), and an empty dags/ or plugins/ (which git does not keep) is fine.
# include/aldebaran becomes importable through an editable install of pyproject.toml (setuptools finds
# the package under include/; setup.py declares the console script and the entry points of the extension
# packages present, so the image's metadata names aldebaran_capacity's commands and none of the lab's).
# Editable rather than PYTHONPATH=/usr/local/airflow/include because it also installs the `aldebaran`
# console script and the package metadata, and because it resolves to /usr/local/airflow/include/aldebaran,
# the directory docker compose and `astro dev start` mount from the host: edits to include/ are live in the
# containers without a rebuild.
RUN --mount=type=bind,target=/tmp/context \
    set -eu; \
    for part in dags plugins include spark_apps setup; do \
      mkdir -p "$part"; \
      if [ -d "/tmp/context/$part" ]; then cp -R "/tmp/context/$part/." "$part/"; fi; \
    done; \
    cp /tmp/context/pyproject.toml /tmp/context/setup.py /tmp/context/README.md .; \
    pip install --no-cache-dir --root-user-action=ignore --no-deps -e /usr/local/airflow; \
    mkdir -p .run; \
    chown -R astro:0 dags plugins include spark_apps setup pyproject.toml setup.py README.md .run

# Connector jars where aldebaran.runtime.paths looks for them (ALDEBARAN_CACHE is its cache root).
ENV ALDEBARAN_CACHE=/opt/aldebaran/cache
COPY --from=connector-jars --chown=astro:0 /jars/ /opt/aldebaran/cache/jars/

USER astro
# The platform's own checkpoint file manager (include/aldebaran/jvm), compiled beside the connector jars now
# rather than by the first spark-submit.
RUN python -c "from aldebaran.runtime import spark; spark.connector_jars(s3a=True)"
