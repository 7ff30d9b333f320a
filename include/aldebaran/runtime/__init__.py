"""What every long-running process of the platform needs about itself and its neighbours on the host.

Today ``procs`` (is a pid alive, and the same process as when it was recorded); the checkpoint layout, the
lease, the heartbeat, the metrics and the paths move here from the package's root in later steps
(docs/design.md "Packages")."""
