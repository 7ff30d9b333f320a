"""What every long-running process of the platform needs about itself and its neighbours on the host.

``procs`` (is a pid alive, and the same process as when it was recorded), ``paths`` and ``envfile`` (where
things live; the git-ignored ``.env``), ``logs``, ``cliparse`` (the commands' parser), ``spark`` (the Spark
plumbing), ``checkpoint`` (the auditor checkpoint's layout) and its ``lease``, ``heartbeat``, ``metrics`` /
``metrics_roles`` (the /metrics endpoints), ``probes`` (/healthz and /readyz) and ``progress`` (long work:
count, rate, ETA)."""
