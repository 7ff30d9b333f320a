// The floor of the low-latency benchmark (aldebaran_capacity.bench.floor): a plain Java consumer reading a
// topic from its end while a segment's trades are produced, recording for each record how long after its
// timestamp (the producer's send stamp) it arrived. No Spark, no Python: the bus's own latency on this box,
// under the same load as the lane. A consumer thread in the bench's Python measured its own tail (p99 ~0.3-0.5 s
// where Kafka's EndToEndLatency tool measured 6 ms), so the floor is taken on the JVM like the producer.
//
// usage: java -cp <kafka-clients and deps>:<dir> FloorConsumer BOOTSTRAP TOPIC SECONDS OUT_FILE
// prints "ready" once every partition is positioned at its end, then after SECONDS one JSON line {"count": n}; OUT_FILE gets one "timestamp_ms<TAB>latency_ms" line per record.
import java.io.BufferedWriter;
import java.io.FileWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class FloorConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        long deadline = System.currentTimeMillis() + (long) (Double.parseDouble(args[2]) * 1000);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.auto.commit", "false");
        props.put("fetch.min.bytes", "1");
        props.put("fetch.max.wait.ms", "100");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
             BufferedWriter out = new BufferedWriter(new FileWriter(args[3], StandardCharsets.UTF_8), 1 << 20)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic)) parts.add(new TopicPartition(topic, p.partition()));
            consumer.assign(parts);
            consumer.seekToEnd(parts);
            for (TopicPartition tp : parts) consumer.position(tp);  // resolve the end offsets now, not lazily
            System.out.println("ready");
            System.out.flush();
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
                long now = System.currentTimeMillis();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    out.write(Long.toString(r.timestamp()));
                    out.write('\t');
                    out.write(Long.toString(now - r.timestamp()));
                    out.newLine();
                    count++;
                }
            }
        }
        System.out.println("{\"count\": " + count + "}");
    }
}
