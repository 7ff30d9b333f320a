"""The auditor as a Spark Structured Streaming job: the query and its start (job), the plan it runs
(plans), one micro-batch (batch), the co-partitioned plan's shard tasks (copartitioned) and the processes
that hold their books (shardhost), and the JVM parse (jvmparse). Everything Spark-specific of the auditor
lives here; the rules, the book step and the state store beside it do not import Spark."""
