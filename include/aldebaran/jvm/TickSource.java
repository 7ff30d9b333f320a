package io.aldebaran.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The auditor's expiry clock: a streaming source with one row per expiry period, so that an idle trades topic
 * still runs a micro-batch (and so expires books) at a bounded cadence, and no more often.
 * {@code spark.readStream.format("io.aldebaran.spark.TickSource").option("period_seconds", "10")}.
 *
 * <p>Its offset is the wall clock divided by the period, {@code {"tick": N}}: Spark sees new data only when a
 * period has passed. The offset is derived from the clock, never stored by the source: a restarted query
 * resumes from its checkpointed offset and the next period's tick follows. The row of a range is the range's
 * end, whatever the range's length (a batch that covers many periods needs one tick).
 *
 * <p>Why in the JVM, not a Python data source (as before): Spark serves a Python streaming source
 * from a Python process it starts with the query and waits for it with a fixed 10 s connect-back timeout
 * ({@code PythonWorkerFactory.createSimpleWorker}). On a saturated box a fresh interpreter importing pyspark
 * and pyarrow (0.54 CPU-s alone) missed it, and the auditor failed at start: "Python worker failed to connect
 * back". This source starts no process, and reads the same offsets, so a checkpoint written with the Python
 * source resumes here.
 */
public final class TickSource implements TableProvider {
  static final StructType SCHEMA = new StructType().add("timestamp", DataTypes.TimestampType, true);
  private static final Pattern TICK = Pattern.compile("\"tick\"\\s*:\\s*(-?\\d+)");

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String period = properties.getOrDefault("period_seconds", "10");
    double seconds;
    try {
      seconds = Double.parseDouble(period);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("TickSource: period_seconds must be a number, got '" + period + "'");
    }
    if (!(seconds > 0) || Double.isInfinite(seconds)) {
      throw new IllegalArgumentException("TickSource: period_seconds must be > 0, got " + period);
    }
    return new Ticks((long) Math.round(seconds * 1_000_000L));
  }

  /** The tick of this instant: wall clock // period. */
  static long nowTick(long periodMicros) {
    return Math.floorDiv(System.currentTimeMillis() * 1000L, periodMicros);
  }

  static long tickOf(Offset offset) {
    if (offset instanceof TickOffset) {
      return ((TickOffset) offset).tick;
    }
    return parse(offset.json());
  }

  static long parse(String json) {
    Matcher m = TICK.matcher(json == null ? "" : json);
    if (!m.find()) {
      throw new IllegalArgumentException("TickSource: not a tick offset: " + json);
    }
    return Long.parseLong(m.group(1));
  }

  /** {@code {"tick": N}}, as the Python source it replaces wrote it (Offset equality compares this text). */
  static final class TickOffset extends Offset {
    final long tick;

    TickOffset(long tick) {
      this.tick = tick;
    }

    @Override
    public String json() {
      return "{\"tick\": " + tick + "}";
    }
  }

  static final class Ticks implements Table, SupportsRead {
    private final long periodMicros;

    Ticks(long periodMicros) {
      this.periodMicros = periodMicros;
    }

    @Override
    public String name() {
      return "aldebaran_ticks(" + periodMicros + "us)";
    }

    @Override
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new Scan() {
        @Override
        public StructType readSchema() {
          return SCHEMA;
        }

        @Override
        public String description() {
          return "aldebaran ticks every " + periodMicros + " us";
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
          return new Stream(periodMicros);
        }
      };
    }
  }

  static final class Stream implements MicroBatchStream, SupportsAdmissionControl {
    private final long periodMicros;

    Stream(long periodMicros) {
      this.periodMicros = periodMicros;
    }

    @Override
    public Offset initialOffset() {
      return new TickOffset(nowTick(periodMicros));
    }

    @Override
    public Offset latestOffset() {
      return new TickOffset(nowTick(periodMicros));
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      // Never behind its start: a clock stepped back must not make Spark see a negative range.
      long now = nowTick(periodMicros);
      return new TickOffset(start == null ? now : Math.max(now, tickOf(start)));
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      return ReadLimit.allAvailable();
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      long to = tickOf(end);
      if (start != null && to <= tickOf(start)) {
        return new InputPartition[0];
      }
      return new InputPartition[] {new Tick(to * periodMicros)};
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new Reader();
    }

    @Override
    public Offset deserializeOffset(String json) {
      return new TickOffset(parse(json));
    }

    @Override
    public void commit(Offset end) {
      // Nothing to release: the offset is the clock.
    }

    @Override
    public void stop() {}
  }

  /** One tick's row: its timestamp in microseconds since the epoch. */
  static final class Tick implements InputPartition {
    private static final long serialVersionUID = 1L;
    final long micros;

    Tick(long micros) {
      this.micros = micros;
    }
  }

  static final class Reader implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      long micros = ((Tick) partition).micros;
      return new PartitionReader<InternalRow>() {
        private boolean done;

        @Override
        public boolean next() {
          if (done) {
            return false;
          }
          done = true;
          return true;
        }

        @Override
        public InternalRow get() {
          return new GenericInternalRow(new Object[] {micros});
        }

        @Override
        public void close() {}
      };
    }
  }
}
