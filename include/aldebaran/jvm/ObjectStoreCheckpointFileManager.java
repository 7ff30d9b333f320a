package io.aldebaran.spark;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.BulkDelete;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * Spark's checkpoint file manager for object stores (spark-hadoop-cloud's abortable-stream manager: each file
 * written straight to its key, the upload aborted if the write fails), without the metadata probes around
 * each write, and with the "nobody else wrote this batch" check done by the store itself.
 *
 * <p>Why: each micro-batch writes two files (offsets/N before it runs, commits/N after). Through Hadoop's
 * FileContext, each write asked the store three times whether the file or its directory existed (a HEAD and a
 * LIST each) around its one PUT: 12 requests of ~25-70 ms in series per batch on this box's MinIO.
 * Here a batch file costs a HEAD and a PUT:
 * <ul>
 *   <li>{@code exists} of a metadata log's batch file ({@code offsets/N}, {@code commits/N}: those directories
 *   hold only files) is one HEAD ({@code isFile}); any other path keeps every probe;</li>
 *   <li>{@code createAtomic} opens the stream through {@link FileSystem#createFile} with s3a's
 *   {@code fs.s3a.create.performance} (no probe before the upload). Where the caller does not allow an
 *   overwrite (the metadata logs), the PUT is conditional ({@code If-None-Match: *}, Hadoop's
 *   {@code fs.option.create.conditional.overwrite}): a second writer of the same batch fails with
 *   {@link FileAlreadyExistsException}, atomically, where the manager this extends asked with a HEAD and a LIST
 *   just before closing (a check with a window).</li>
 *   <li>{@code delete} of a metadata log's batch file (Spark purges the files older than
 *   {@code minBatchesToRetain} after every batch, two a batch) is one DELETE through Hadoop's bulk-delete API,
 *   where FileContext's delete asked for the file's status (a HEAD and a LIST) and, after the DELETE, listed the
 *   parent to recreate a directory marker: 4 requests a file, 16 % of the auditor JVM's CPU at 1,000 events/s
 *   (a JFR profile of the deployed auditor, docs/design.md "The fixed cost of a batch").</li>
 * </ul>
 * Measured side by side with the manager it extends: {@code aldebaran bench checkpoint-files}
 * (docs/design.md, "Checkpoints on S3").
 */
public class ObjectStoreCheckpointFileManager extends AbortableStreamBasedCheckpointFileManager {
    private static final Pattern BATCH_FILE = Pattern.compile("\\d+(\\.compact)?");
    static final String PERFORMANCE = "fs.s3a.create.performance";
    static final String CONDITIONAL = "fs.option.create.conditional.overwrite";
    /** Hadoop conf ({@code spark.hadoop.aldebaran.checkpoint.delete}): {@code bulk} (the default, one DELETE a
     * purged batch file) or {@code filecontext} (Spark's own path, kept for a same-run A/B:
     * {@code aldebaran bench batch-cost}). */
    static final String DELETE_MODE = "aldebaran.checkpoint.delete";
    private final FileSystem fs;
    private final boolean bulkDelete;

    public ObjectStoreCheckpointFileManager(Path path, Configuration conf) {
        super(path, conf);
        String mode = conf.get(DELETE_MODE, "bulk");
        if (!mode.equals("bulk") && !mode.equals("filecontext")) {
            throw new IllegalArgumentException(DELETE_MODE + " must be bulk or filecontext, not " + mode);
        }
        this.bulkDelete = mode.equals("bulk");
        try {
            this.fs = path.getFileSystem(conf);
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    /** A batch file of a metadata log: {@code .../offsets/N} or {@code .../commits/N} (or N.compact). */
    public static boolean isMetadataLogFile(Path path) {
        Path parent = path.getParent();
        if (parent == null || !BATCH_FILE.matcher(path.getName()).matches()) {
            return false;
        }
        String dir = parent.getName();
        return dir.equals("offsets") || dir.equals("commits");
    }

    @Override
    @SuppressWarnings("deprecation")  // deprecated in FileSystem for HDFS's sake; s3a's isFile is one HEAD
    public boolean exists(Path path) {
        if (!isMetadataLogFile(path)) {
            return super.exists(path);
        }
        try {
            return fs.isFile(path);
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    /** A metadata log's batch file: one DELETE (an absent key is not an error, as the interface asks). */
    @Override
    public void delete(Path path) {
        if (!bulkDelete || !isMetadataLogFile(path)) {
            super.delete(path);
            return;
        }
        try (BulkDelete bulk = fs.createBulkDelete(path.getParent())) {
            List<Map.Entry<Path, String>> failed = bulk.bulkDelete(List.of(path));
            if (!failed.isEmpty()) {
                throw new IOException("delete " + path + " refused by the store: " + failed.get(0).getValue());
            }
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    @Override
    @SuppressWarnings("rawtypes")  // Hadoop's builder is generic over its own subclass
    public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        try {
            FSDataOutputStreamBuilder builder = fs.createFile(path);
            builder.overwrite(true);
            builder.opt(PERFORMANCE, "true");
            if (!overwriteIfPossible) {
                builder.must(CONDITIONAL, "true");
            }
            return new Upload(path, (FSDataOutputStream) builder.build());
        } catch (IOException e) {
            throw sneaky(e);
        }
    }

    /** The upload happens at close (one PUT); cancel aborts it, so nothing half-written is ever visible. */
    static final class Upload extends CheckpointFileManager.CancellableFSDataOutputStream {
        private final Path path;
        private final FSDataOutputStream out;
        private boolean terminated;

        Upload(Path path, FSDataOutputStream out) {
            super(out);
            this.path = path;
            this.out = out;
        }

        @Override
        public synchronized void cancel() {
            if (terminated) {
                return;
            }
            terminated = true;
            out.abort();
        }

        @Override
        public synchronized void close() throws IOException {
            if (terminated) {
                return;
            }
            terminated = true;
            try {
                out.close();
            } catch (IOException e) {
                // A conditional PUT refused (412): another writer has this batch. Spark names that case by
                // this exception type (several queries on one checkpoint).
                if (e instanceof FileAlreadyExistsException || String.valueOf(e.getMessage()).contains("412")) {
                    FileAlreadyExistsException taken = new FileAlreadyExistsException(path + " was written by "
                        + "another writer (conditional create refused)");
                    taken.initCause(e);
                    throw taken;
                }
                throw e;
            }
        }

        @Override
        public String toString() {
            return "ObjectStoreCheckpointFileManager.Upload(" + path + ")";
        }
    }

    // Spark's Scala callers take the store's IOException as it is (they fail the batch on it), but the
    // interface's Scala methods declare none.
    @SuppressWarnings("unchecked")
    private static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
        throw (E) e;
    }
}
