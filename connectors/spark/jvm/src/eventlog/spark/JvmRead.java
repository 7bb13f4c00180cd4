package eventlog.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.util.TaskCompletionListener;

/** The driver side of the JVM batch reader, called from Python through py4j ({@code connectors/spark/jvm/read.py}). */
public final class JvmRead {
    private JvmRead() {
    }

    /**
     * Null when tasks can read segments of the schema in {@code schemaMessage} as rows of {@code sparkSchema}
     * (the stream's columns, then {@code _time, _part, _seq}: Spark reads each Arrow column as the type the
     * Python reader gives it, through {@code ArrowColumnVector}), else why not.
     */
    public static String unsupported(byte[] schemaMessage, StructType sparkSchema) {
        try {
            Schema segment = EventEncoder.readSchema(schemaMessage);
            List<Field> fields = segment.getFields();
            List<Field> records = fields.subList(0, fields.size() - 2);
            StructField[] spark = sparkSchema.fields();
            if (records.size() + 3 != spark.length) {
                return "the stream has " + records.size() + " columns, the read schema " + spark.length;
            }
            for (int i = 0; i < records.size(); i++) {
                String arrow = ArrowUtils.fromArrowField(records.get(i)).catalogString();
                String own = spark[i].dataType().catalogString();
                if (!arrow.equals(own)) {
                    return "column " + spark[i].name() + " is stored as Arrow " + records.get(i).getType()
                        + ", which Spark's Arrow reader reads as " + arrow + ", not " + own;
                }
            }
            try (BufferAllocator alloc = ArrowUtils.rootAllocator().newChildAllocator("eventlog-read-check", 0,
                     Long.MAX_VALUE);
                 VectorSchemaRoot root = VectorSchemaRoot.create(segment, alloc)) {
                for (int i = 0; i < records.size(); i++) {
                    new ArrowColumnVector(root.getVector(i));  // throws for vectors it has no accessor for
                }
            }
            return null;
        } catch (Throwable t) {
            return t.toString();
        }
    }

    /** The stream as a DataFrame of {@code schema}: one partition per replay worker, read when a job runs. */
    public static Dataset<Row> read(SparkSession session, ReadSpec spec, StructType schema) {
        JavaSparkContext jsc = JavaSparkContext.fromSparkContext(session.sparkContext());
        List<Integer> workers = new ArrayList<>();
        for (int j = 0; j < spec.workers; j++) {
            workers.add(j);
        }
        JavaRDD<InternalRow> rows = jsc.parallelize(workers, Math.max(spec.workers, 1))
            .mapPartitionsWithIndex(new ReadTask(spec), true);
        return session.internalCreateDataFrame(rows.rdd(), schema, false);
    }

    /** The function each partition (replay worker) runs. */
    static final class ReadTask implements Function2<Integer, Iterator<Integer>, Iterator<InternalRow>> {
        private static final long serialVersionUID = 1L;
        private final ReadSpec spec;

        ReadTask(ReadSpec spec) {
            this.spec = spec;
        }

        @Override
        public Iterator<InternalRow> call(Integer worker, Iterator<Integer> ignored) throws Exception {
            List<Integer> parts = new ArrayList<>();
            for (int i = 0; i < spec.peers; i++) {
                if (i % spec.workers == worker) {
                    parts.add(i);
                }
            }
            BufferAllocator alloc = ArrowUtils.rootAllocator().newChildAllocator("eventlog-read-" + worker, 0,
                Long.MAX_VALUE);
            PartBatches batches = new PartBatches(spec, parts, alloc);
            TaskContext ctx = TaskContext.get();
            if (ctx != null) {
                ctx.addTaskCompletionListener(new TaskCompletionListener() {
                    @Override
                    public void onTaskCompletion(TaskContext context) {
                        batches.close();
                    }
                });
            }
            return batches;
        }
    }
}
