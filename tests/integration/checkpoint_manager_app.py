"""A Spark application for test_checkpoint_manager: drives the platform's checkpoint file manager
(aldebaran/jvm, io.aldebaran.spark.ObjectStoreCheckpointFileManager) on an s3a:// prefix of the real MinIO
and writes what it saw as JSON to argv[2]. Usage: python checkpoint_manager_app.py s3a://BUCKET/PREFIX OUT.json"""

import json
import sys

from aldebaran import spark as sparkmod


def main() -> None:
    base, out_path = sys.argv[1], sys.argv[2]
    session = sparkmod.session("aldebaran-checkpoint-manager", master="local[1]", s3a=True)
    seen: dict = {"manager": session.conf.get("spark.sql.streaming.checkpointFileManagerClass")}
    try:
        jvm = session._jvm
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
        seen["is_metadata_log_file"] = [jvm.io.aldebaran.spark.ObjectStoreCheckpointFileManager.isMetadataLogFile(
            Path(p)) for p in (f"{base}/offsets/12", f"{base}/commits/3", f"{base}/state/0/1", f"{base}/offsets")]
    finally:
        session.stop()
    with open(out_path, "w") as fh:
        json.dump(seen, fh)


if __name__ == "__main__":
    main()
