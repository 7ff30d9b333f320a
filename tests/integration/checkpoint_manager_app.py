"""A Spark application for test_checkpoint_manager: drives the platform's checkpoint file manager
(aldebaran/jvm, io.aldebaran.spark.ObjectStoreCheckpointFileManager) on an s3a:// prefix of the real MinIO
and writes what it saw as JSON to argv[2]. Usage: python checkpoint_manager_app.py s3a://BUCKET/PREFIX OUT.json"""

import json
import sys

from aldebaran.runtime import spark as sparkmod


def main() -> None:
    base, out_path = sys.argv[1], sys.argv[2]
    session = sparkmod.session("aldebaran-checkpoint-manager", master="local[1]", s3a=True)
    seen: dict = {"manager": session.conf.get("spark.sql.streaming.checkpointFileManagerClass")}
    try:
        jvm = session._jvm
        # the JVM this process launched: its command line (what `ps` shows every user) holds no secret
        from aldebaran.storage.s3access import resolve

        secret = resolve().secret_key
        cmdline = open(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/cmdline", "rb").read()
        seen["secret_on_command_line"] = bool(secret) and secret.get_secret_value().encode() in cmdline
        conf = session._jsparkSession.sessionState().newHadoopConf()
        Path = jvm.org.apache.hadoop.fs.Path
        offsets = Path(f"{base}/offsets")
        manager = jvm.io.aldebaran.spark.ObjectStoreCheckpointFileManager(offsets.getParent(), conf)
        manager.mkdirs(offsets)
        first = Path(offsets, "0")
        seen["exists_before"] = manager.exists(first)
        out = manager.createAtomic(first, False)
        out.write(bytearray(b"v1"))
        out.close()
        seen["exists_after"] = manager.exists(first)
        # a second writer of the same batch file: the conditional create refuses it
        out = manager.createAtomic(first, False)
        out.write(bytearray(b"v2"))
        try:
            out.close()
            seen["second_write"] = "accepted"
        except Exception as exc:  # noqa: BLE001 - py4j's error carries the Java exception, reported as its class
            seen["second_write"] = exc.java_exception.getClass().getName()
        seen["content"] = bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(manager.open(first))).decode()
        # an overwrite where the caller allows it
        out = manager.createAtomic(first, True)
        out.write(bytearray(b"v3"))
        out.close()
        seen["content_after_overwrite"] = bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(manager.open(first))).decode()
        # a cancelled write leaves nothing
        second = Path(offsets, "1")
        out = manager.createAtomic(second, False)
        out.write(bytearray(b"half"))
        out.cancel()
        seen["cancelled_exists"] = manager.exists(second)
        # a purged batch file: one DELETE, no probe (Spark's own delete probed and listed around it); an absent
        # one is not an error. The same through Spark's path (the A/B's `filecontext`), for the contrast.
        fs = offsets.getFileSystem(conf)

        def requests(fn) -> dict:
            names = ("object_delete_request", "object_bulk_delete_request", "object_metadata_request",
                     "object_list_request", "object_put_request")
            before = {n: fs.getIOStatistics().counters().get(n) or 0 for n in names}
            fn()
            return {n: (fs.getIOStatistics().counters().get(n) or 0) - before[n] for n in names}

        seen["delete_requests"] = requests(lambda: manager.delete(first))
        seen["exists_after_delete"] = manager.exists(first)
        seen["delete_absent_requests"] = requests(lambda: manager.delete(Path(offsets, "99")))
        conf.set("aldebaran.checkpoint.delete", "filecontext")
        spark_way = jvm.io.aldebaran.spark.ObjectStoreCheckpointFileManager(offsets.getParent(), conf)
        third = Path(offsets, "2")
        out = spark_way.createAtomic(third, False)
        out.write(bytearray(b"v1"))
        out.close()
        spark_way.delete(third)
        seen["filecontext_exists_after_delete"] = spark_way.exists(third)
        conf.set("aldebaran.checkpoint.delete", "sometimes")
        try:
            jvm.io.aldebaran.spark.ObjectStoreCheckpointFileManager(offsets.getParent(), conf)
            seen["bad_mode"] = "accepted"
        except Exception as exc:  # noqa: BLE001 - py4j's error carries the Java exception
            seen["bad_mode"] = str(exc)  # pyspark turns it into its own IllegalArgumentException
        seen["is_metadata_log_file"] = [jvm.io.aldebaran.spark.ObjectStoreCheckpointFileManager.isMetadataLogFile(
            Path(p)) for p in (f"{base}/offsets/12", f"{base}/commits/3", f"{base}/state/0/1", f"{base}/offsets")]
    finally:
        session.stop()
    with open(out_path, "w") as fh:
        json.dump(seen, fh)


if __name__ == "__main__":
    main()
