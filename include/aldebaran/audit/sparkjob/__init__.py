"""The auditor as a Spark Structured Streaming job: the query and its start (job), the plan it runs (plans),
one micro-batch (batch), what every shard task shares (rows), the co-partitioned plan's shard step
(copartitioned) and the processes that hold its books (shardhost; the tasks that relay to them, shardtasks;
what both share, shardwire), the shuffle plan (shuffle) and its JVM parse (jvmparse), the end pass (endpass)
and the warm standby (standby). Everything Spark-specific of the
auditor lives here; the rules, the book step and the state store beside it do not import Spark."""
