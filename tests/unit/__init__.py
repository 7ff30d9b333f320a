"""Unit tests, one folder per package of include/ (tests/unit/aldebaran/delivery/ covers aldebaran.delivery).

Every folder here is a package (an ``__init__.py``), rather than pytest's ``--import-mode=importlib``: the
same basename may sit in two folders (each is imported by its full dotted name, tests.unit.aldebaran.…),
and the tests keep importing one another's fixtures and helpers by that name (tests.unit.support.alerts,
tests/integration importing tests.unit.plugins.test_plugin_unit), which importlib mode would not allow.
"""
