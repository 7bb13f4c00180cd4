package eventlog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.NoSuchElementException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.StructType;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.runtime.AbstractFunction2;

/**
 * The function each partition of a JVM-tapped RDD runs: the rows pass through unchanged and are captured
 * into the attempt's staging; the attempt that reads its whole partition publishes it (the first one
 * wins); an attempt that fails or is not read to the end discards its staging. A partition whose part is
 * published already (a retried or speculative task, a second action on the tapped DataFrame) passes its
 * rows through and keeps nothing — as {@code capture/tap.py::_TapPartition}. Each attempt that ends removes
 * the staging folders left for published partitions ({@code sweepJob}): the last one to publish removes what
 * attempts of dead executors left. An attempt whose capture fails passes its rows on, keeping nothing, when
 * another attempt published its partition meanwhile (that one's sweep may have removed its staging under it);
 * otherwise the task fails.
 * A Scala function over Scala iterators: the rows pass through no Java/Scala iterator wrappers.
 */
public final class PartTap extends AbstractFunction2<Object, Iterator<InternalRow>, Iterator<InternalRow>>
        implements Serializable {
    private static final long serialVersionUID = 1L;
    private final TapSpec spec;
    private final StructType schema;

    public PartTap(TapSpec spec, StructType schema) {
        this.spec = spec;
        this.schema = schema;
    }

    @Override
    public Iterator<InternalRow> apply(Object partition, Iterator<InternalRow> rows) {
        int part = (Integer) partition;
        if (part >= spec.peers) {
            throw new IllegalStateException("the tapped DataFrame has more partitions than the " + spec.peers
                + " the tap was created with (stream " + spec.stream + ", part " + part + ")");
        }
        return new AbstractIterator<InternalRow>() {
            private PartCapture capture = start(part);
            private boolean done = capture == null;
            private UnsafeProjection toUnsafe;

            @Override
            public boolean hasNext() {
                if (rows.hasNext()) {
                    return true;
                }
                if (!done) {
                    done = true;
                    try {
                        capture.finish();  // false: another attempt published this partition first
                    } catch (IOException e) {
                        lost(capture, part, e);
                    }
                    PartCapture.sweepJob(spec);  // what attempts of dead executors left behind
                }
                return false;
            }

            @Override
            public InternalRow next() {
                if (!rows.hasNext()) {
                    throw new NoSuchElementException();
                }
                InternalRow row = rows.next();
                if (!(row instanceof UnsafeRow)) {  // TapScanExec hands the rows on: they must be UnsafeRows
                    if (toUnsafe == null) {
                        toUnsafe = UnsafeProjection.create(schema);
                    }
                    row = toUnsafe.apply(row);
                }
                if (capture != null) {
                    try {
                        capture.add(row);
                    } catch (IOException e) {
                        lost(capture, part, e);
                        capture = null;
                        done = true;
                    }
                }
                return row;
            }
        };
    }

    /** The capture of {@code part} by this attempt; null when the part is published already (a retried or
     * speculative task, a second action: the rows pass, unkept). */
    private PartCapture start(int part) {
        try {
            return PartCapture.published(spec, part) ? null : PartCapture.forTask(spec, part);
        } catch (IOException e) {
            lost(null, part, e);  // no capture was made
            return null;
        }
    }

    /**
     * Capturing {@code part} failed with {@code error}. When another attempt has published the partition (its
     * sweep may have removed this attempt's staging under it), the staging is dropped and the rows pass on;
     * otherwise the task fails with {@code error}: the log must not miss this partition. As
     * {@code capture/tap.py::_TapPartition._lost}.
     */
    private void lost(PartCapture capture, int part, IOException error) {
        if (capture != null) {
            capture.discard();
        }
        boolean published;
        try {
            published = PartCapture.published(spec, part);
        } catch (IOException e) {
            error.addSuppressed(e);
            published = false;
        }
        if (!published) {
            throw new UncheckedIOException("eventlog JVM tap could not write stream " + spec.stream + " part " + part
                + ": " + error, error);
        }
    }
}
