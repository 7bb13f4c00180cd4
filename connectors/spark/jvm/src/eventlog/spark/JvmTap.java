package eventlog.spark;

import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import scala.reflect.ClassTag$;

/** The driver side of the JVM tap, called from Python through py4j ({@code connectors/spark/jvm}). */
public final class JvmTap {
    private JvmTap() {
    }

    /** The hash of the sources this class was compiled from (to detect an older build loaded in this JVM). */
    public static String build() {
        return Build.HASH;
    }

    /**
     * Null when tasks can capture rows of {@code sparkSchema} into segments of the schema in
     * {@code schemaMessage} (Spark's ArrowWriter writes every column into the vector of its Arrow type),
     * else why not.
     */
    public static String unsupported(byte[] schemaMessage, StructType sparkSchema) {
        try {
            Schema segment = EventEncoder.readSchema(schemaMessage);
            List<Field> fields = segment.getFields();
            List<Field> records = fields.subList(0, fields.size() - 2);
            StructField[] spark = sparkSchema.fields();
            if (records.size() != spark.length) {
                return "the stream schema has " + records.size() + " columns, the DataFrame " + spark.length;
            }
            for (int i = 0; i < spark.length; i++) {
                String arrow = ArrowUtils.fromArrowField(records.get(i)).catalogString();
                String own = spark[i].dataType().catalogString();
                if (!arrow.equals(own)) {
                    return "column " + spark[i].name() + " of type " + own + " is stored as Arrow "
                        + records.get(i).getType() + ", which Spark reads as " + arrow;
                }
            }
            try (BufferAllocator alloc = ArrowUtils.rootAllocator().newChildAllocator("eventlog-tap-check", 0,
                     Long.MAX_VALUE);
                 VectorSchemaRoot root = VectorSchemaRoot.create(new Schema(records), alloc)) {
                ArrowWriter.create(root);
            }
            return null;
        } catch (Throwable t) {
            return t.toString();
        }
    }

    /**
     * Run a job that captures each partition of {@code rdd} into a staging folder of its own (a micro-batch);
     * returns one line per partition, {@code partition <TAB> attempt <TAB> rows <TAB> folder}, of the attempt
     * Spark kept.
     */
    public static String[] stage(RDD<InternalRow> rdd, TapSpec spec) {
        Object lines = rdd.mapPartitionsWithIndex(new PartStage(spec), false, ClassTag$.MODULE$.apply(String.class))
            .collect();
        return (String[]) lines;
    }

    /**
     * A client of the S3-protocol store at {@code endpoint} ("" for AWS S3) for {@code bucket} (an empty access key:
     * anonymous); with {@link #put} and {@link #exists}, the requests the tap makes, for tests and tools.
     */
    public static Object objectStore(String endpoint, String region, String bucket, String accessKey,
                                     String secretKey, String sessionToken) {
        return new ObjectStore(endpoint, region, bucket, accessKey, secretKey, sessionToken);
    }

    /** Put the local file {@code path} at {@code key} of {@code store} ({@link #objectStore}); see ObjectStore. */
    public static boolean put(Object store, String key, String path, boolean exclusive) throws java.io.IOException {
        return ((ObjectStore) store).put(key, java.nio.file.Paths.get(path), exclusive);
    }

    /** Whether an object is at {@code key} of {@code store} ({@link #objectStore}). */
    public static boolean exists(Object store, String key) throws java.io.IOException {
        return ((ObjectStore) store).exists(key);
    }

    /** The object at {@code key} of {@code store} ({@link #objectStore}), or null; refused over {@code limit} bytes. */
    public static byte[] get(Object store, String key, long limit) throws java.io.IOException {
        return ((ObjectStore) store).get(key, limit);
    }

    /** The names directly below {@code prefix} on {@code store} ({@link #objectStore}), sorted. */
    public static String[] list(Object store, String prefix) throws java.io.IOException {
        return ((ObjectStore) store).list(prefix).toArray(new String[0]);
    }

    /**
     * The URI and headers ({@code "name: value"}) of the request {@code method} on {@code key} (null: the bucket)
     * with {@code query} ({@code [name, value, ...]}) to {@code store} ({@link #objectStore}), signed but not sent.
     */
    public static String[] unsentRequest(Object store, String method, String key, String[] query, boolean exclusive)
            throws java.io.IOException {
        java.util.TreeMap<String, String> q = new java.util.TreeMap<>();
        for (int i = 0; i + 1 < query.length; i += 2) {
            q.put(query[i], query[i + 1]);
        }
        java.net.http.HttpRequest r = ((ObjectStore) store).unsent(method, key, q.isEmpty() ? null : q, exclusive);
        java.util.List<String> out = new java.util.ArrayList<>();
        out.add(r.uri().toString());
        r.headers().map().forEach((name, values) -> values.forEach(v -> out.add(name + ": " + v)));
        return out.toArray(new String[0]);
    }

    /** {@code rdd}'s rows as a DataFrame of {@code schema}, each partition captured when a job computes it. */
    public static Dataset<Row> tap(SparkSession session, RDD<InternalRow> rdd, StructType schema, TapSpec spec) {
        RDD<InternalRow> tapped = rdd.mapPartitionsWithIndex(new PartTap(spec, schema), true,
            ClassTag$.MODULE$.apply(InternalRow.class));
        tapped.setName(TapStrategy.RDD_NAME);  // scanned by TapScanExec (no copy of every row) once installed
        TapStrategy.install(session);
        return session.internalCreateDataFrame(tapped, schema, false);
    }
}
