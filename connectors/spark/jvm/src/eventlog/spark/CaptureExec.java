package eventlog.spark;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.plans.physical.Partitioning;
import org.apache.spark.sql.execution.SparkPlan;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.reflect.ClassTag$;

/**
 * The pass-through node {@link CaptureRule} puts above a captured operator ({@code EventlogCapture} in
 * {@code explain()}): its rows are the operator's, unchanged, and each task writes its partition as one part of
 * the operator's stream by the JVM tap's code ({@link PartTap}: staged per attempt, the first attempt that reads
 * its whole partition publishes it, the others keep nothing). The stream is created on the driver when the
 * node's output is first computed (then the partition count is known); computed again (a second action, a
 * reused exchange) it is the same RDD, whose published partitions pass uncaptured. It has its child's
 * partitioning and ordering, and canonicalizes to its child, so exchange reuse and caching see no difference.
 */
public final class CaptureExec extends SparkPlan {
    private static final long serialVersionUID = 1L;
    private final SparkPlan child;
    private final CaptureQuery.Op op;
    private transient RDD<InternalRow> tapped;

    public CaptureExec(SparkPlan child, CaptureQuery.Op op) {
        this.child = child;
        this.op = op;
    }

    public SparkPlan child() {
        return child;
    }

    CaptureQuery.Op op() {
        return op;
    }

    @Override
    public Seq<Attribute> output() {
        return child.output();
    }

    @Override
    public Partitioning outputPartitioning() {
        return child.outputPartitioning();
    }

    @Override
    public Seq<SortOrder> outputOrdering() {
        return child.outputOrdering();
    }

    @Override
    public synchronized RDD<InternalRow> doExecute() {
        if (tapped == null) {
            RDD<InternalRow> rdd = child.execute();
            TapSpec spec = op.open(rdd.getNumPartitions());
            tapped = spec == null ? rdd : rdd.mapPartitionsWithIndex(new PartTap(spec, op.schema), true,
                ClassTag$.MODULE$.apply(InternalRow.class));
        }
        return tapped;
    }

    @Override
    public SparkPlan doCanonicalize() {
        return child.canonicalized();
    }

    @Override
    public String nodeName() {
        return "EventlogCapture";
    }

    @Override
    public String simpleString(int maxFields) {
        return "EventlogCapture " + op.stream;
    }

    @Override
    public Seq<SparkPlan> children() {
        return TapStrategy.<SparkPlan>none().$colon$colon(child);
    }

    @Override
    public SparkPlan withNewChildrenInternal(IndexedSeq<SparkPlan> children) {
        return new CaptureExec(children.head(), op);
    }

    @Override
    public int productArity() {
        return 2;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0: return child;
            case 1: return op;
            default: throw new IndexOutOfBoundsException(Integer.toString(n));
        }
    }

    @Override
    public boolean canEqual(Object that) {
        return that instanceof CaptureExec;
    }

    @Override
    public boolean equals(Object that) {
        return that instanceof CaptureExec && ((CaptureExec) that).op == op && ((CaptureExec) that).child.equals(child);
    }

    @Override
    public int hashCode() {
        return 31 * child.hashCode() + System.identityHashCode(op);
    }
}
