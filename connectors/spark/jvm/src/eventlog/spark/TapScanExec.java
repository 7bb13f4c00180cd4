package eventlog.spark;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.execution.LeafExecNode;
import org.apache.spark.sql.execution.SparkPlan;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;

/**
 * The physical scan of a JVM-tapped DataFrame (planned by {@link TapStrategy}): its rows are those of the tap's
 * RDD, handed on as they are. Spark's own scan of an RDD ({@code RDDScanExec}) builds a new {@code UnsafeRow}
 * of every row, which the tap's rows already are ({@link PartTap} makes sure of it).
 */
public final class TapScanExec extends SparkPlan implements LeafExecNode {
    private static final long serialVersionUID = 1L;
    private final Seq<Attribute> output;
    private final transient RDD<InternalRow> rdd;

    public TapScanExec(Seq<Attribute> output, RDD<InternalRow> rdd) {
        this.output = output;
        this.rdd = rdd;
    }

    @Override
    public Seq<Attribute> output() {
        return output;
    }

    @Override
    public RDD<InternalRow> doExecute() {
        return rdd;
    }

    @Override
    public String nodeName() {
        return "EventlogTapScan";
    }

    @Override
    public Seq<SparkPlan> children() {
        return TapStrategy.none();
    }

    @Override
    public SparkPlan withNewChildrenInternal(IndexedSeq<SparkPlan> children) {
        return this;
    }

    @Override
    public int productArity() {
        return 2;
    }

    @Override
    public Object productElement(int n) {
        switch (n) {
            case 0: return output;
            case 1: return rdd;
            default: throw new IndexOutOfBoundsException(Integer.toString(n));
        }
    }

    @Override
    public boolean canEqual(Object that) {
        return that instanceof TapScanExec;
    }

    @Override
    public boolean equals(Object that) {
        return that instanceof TapScanExec && ((TapScanExec) that).rdd == rdd
            && ((TapScanExec) that).output.equals(output);
    }

    @Override
    public int hashCode() {
        return 31 * output.hashCode() + System.identityHashCode(rdd);
    }
}
