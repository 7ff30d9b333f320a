"""The lab: the tools around the product — benchmarks, load generation, test receivers, chaos
campaigns, local services, demo.

It imports the product (:mod:`aldebaran`), never the reverse: nothing a deployment imports depends on
this package. Some lab code still lives under ``aldebaran`` (``bench/``, ``chaos/``, ``demo.py``) and
moves here later; until then it is the only part of ``aldebaran`` allowed to import ``aldebaran_lab``.
"""
