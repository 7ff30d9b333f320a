"""Capacity tests: the tools Airflow itself runs to measure the platform (the ``capacity_test`` DAG,
``make bench``): the load generator (:mod:`.loadgen`), the benchmarks (:mod:`.bench`) and the local
test receivers the deliveries are counted at (:mod:`.receivers`).

It is in the image beside the product (the DAG imports it) and imports the product (:mod:`aldebaran`)
only; the product never imports it. Its commands (``aldebaran loadgen``, ``aldebaran bench``) are
registered by :mod:`.cli` when the package is importable.
"""
