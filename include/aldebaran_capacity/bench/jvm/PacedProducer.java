// A paced Kafka producer for the low-latency benchmark (aldebaran_capacity.bench.paced): the trades of a
// segment from a file ("key<TAB>value" per line), sent at a fixed rate by the Java client, each record
// stamped with the wall clock as it is sent. Why not the Python producer: in the same run, trades paced by
// confluent-kafka from Python reached a plain consumer with a p99 of 221-813 ms at 1k-50k/s while Kafka's
// own end-to-end tool measured 6 ms (docs/design.md, "The low-latency lane"): the tail was the harness's.
//
// usage: java -cp <kafka-clients and deps>:<dir> PacedProducer BOOTSTRAP TOPIC RATE RECORDS_FILE STAMPS_FILE [LINGER_MS]
// prints one JSON line: {"count", "seconds", "errors"}; STAMPS_FILE gets each record's timestamp (ms), in order.
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.FileReader;
import java.io.FileWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class PacedProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        double rate = Double.parseDouble(args[2]);
        List<byte[][]> records = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(new FileReader(args[3], StandardCharsets.UTF_8))) {
            for (String line; (line = in.readLine()) != null; ) {
                int tab = line.indexOf('\t');
                records.add(new byte[][] {line.substring(0, tab).getBytes(StandardCharsets.UTF_8),
                                          line.substring(tab + 1).getBytes(StandardCharsets.UTF_8)});
            }
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        // linger.ms: 0 by default here (latency first: every record leaves at once); the 6th argument sets it.
        props.put("linger.ms", args.length > 5 ? args[5] : "0");
        props.put("compression.type", "none");  // one record per batch at low rates: compressing it is pure cost
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        long[] stamps = new long[records.size()];
        AtomicLong errors = new AtomicLong();
        long t0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic);  // metadata before the clock starts
            Thread.sleep(1000);  // and the JVM's start-up CPU (class loading, the JIT) behind us, not in the segment
            double nanosPerRecord = 1e9 / rate;
            t0 = System.nanoTime();
            int i = 0;
            while (i < records.size()) {
                long now = System.nanoTime();
                // Everything due by now goes out (parkNanos overshoots by ~50-100 us here).
                while (i < records.size() && t0 + (long) (i * nanosPerRecord) <= now) {
                    long ts = System.currentTimeMillis();
                    stamps[i] = ts;
                    byte[][] r = records.get(i);
                    producer.send(new ProducerRecord<>(topic, null, ts, r[0], r[1]), (meta, exc) -> {
                        if (exc != null) errors.incrementAndGet();
                    });
                    i++;
                }
                // Sleep until the next record is due (at least 50 us): a fixed short park spun ~0.5 core at 1k/s,
                // CPU the lane under test then did not have.
                if (i < records.size()) {
                    long due = t0 + (long) (i * nanosPerRecord) - System.nanoTime();
                    LockSupport.parkNanos(Math.max(50_000L, due));
                }
            }
            producer.flush();
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        try (BufferedWriter out = new BufferedWriter(new FileWriter(args[4], StandardCharsets.UTF_8))) {
            for (long s : stamps) {
                out.write(Long.toString(s));
                out.newLine();
            }
        }
        System.out.println("{\"count\": " + records.size() + ", \"seconds\": " + seconds + ", \"errors\": " + errors.get() + "}");
    }
}
