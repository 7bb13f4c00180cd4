package eventlog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import org.apache.spark.sql.catalyst.InternalRow;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction2;

/**
 * The function each partition of a micro-batch runs (a Structured Streaming micro-batch handed to
 * {@code foreachBatch}): its rows are captured into the attempt's staging folder, sealed, and the task returns
 * one line {@code partition <TAB> attempt <TAB> rows <TAB> staging folder name} for the driver (on S3 the
 * staged part is copied to the log's staging area on the store first), which appends the
 * staged parts to the open stream ({@code connectors/spark/write.py::append_micro_batch}), as the Python
 * writer's tasks do ({@code PartStager}). Spark keeps the result of one attempt per partition; the others'
 * folders are removed with the job's staging folder.
 */
public final class PartStage extends AbstractFunction2<Object, Iterator<InternalRow>, Iterator<String>>
        implements Serializable {
    private static final long serialVersionUID = 1L;
    private final TapSpec spec;

    public PartStage(TapSpec spec) {
        this.spec = spec;
    }

    @Override
    public Iterator<String> apply(Object partition, Iterator<InternalRow> rows) {
        int part = (Integer) partition;
        try {
            PartCapture capture = PartCapture.forTask(spec, part);
            while (rows.hasNext()) {
                capture.add(rows.next());
            }
            long n = capture.rows;
            String root = capture.finishStaged();
            return scala.collection.Iterator$.MODULE$.single(part + "\t" + capture.attempt + "\t" + n + "\t" + root);
        } catch (IOException e) {
            throw new UncheckedIOException("eventlog JVM tap could not stage stream " + spec.stream + " part " + part
                + ": " + e, e);
        }
    }
}
