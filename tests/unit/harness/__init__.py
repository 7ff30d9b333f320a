"""Tests of the test harness itself (tests/schedule.py, tests/airflow_home.py)."""
