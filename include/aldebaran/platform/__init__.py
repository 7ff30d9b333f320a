"""Running the platform: the auditor's supervisor and checkpoint lease, platform health, replays.
The Airflow DAGs (dags/auditor_supervisor.py, platform_health.py, trades_replay.py) call into here."""
