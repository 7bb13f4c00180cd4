package eventlog.spark;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import scala.collection.immutable.List;
import scala.collection.immutable.Nil$;
import scala.collection.immutable.Seq;

/**
 * Plans the scan of a JVM-tapped DataFrame (a {@code LogicalRDD} over an RDD named {@link #RDD_NAME}) as a
 * {@link TapScanExec}, which hands the tap's rows on without copying them; every other plan is left to Spark's
 * strategies. Added once to a session's {@code experimental.extraStrategies} by {@link #install}.
 */
public final class TapStrategy extends SparkStrategy {
    private static final long serialVersionUID = 1L;
    /** The name {@link JvmTap#tap} gives the tapped RDD. */
    static final String RDD_NAME = "eventlog JVM tap";

    @Override
    public Seq<SparkPlan> apply(LogicalPlan plan) {
        if (plan instanceof LogicalRDD) {
            RDD<InternalRow> rdd = ((LogicalRDD) plan).rdd();
            if (RDD_NAME.equals(rdd.name())) {
                return TapStrategy.<SparkPlan>none().$colon$colon(new TapScanExec(plan.output(), rdd));
            }
        }
        return none();
    }

    @SuppressWarnings("unchecked")
    static <T> List<T> none() {
        return (List<T>) (Object) Nil$.MODULE$;
    }

    /** Add this strategy to {@code session}'s planner unless it is there; false if it could not be added. */
    static synchronized boolean install(SparkSession session) {
        try {
            Seq<SparkStrategy> strategies = session.experimental().extraStrategies();
            if (strategies.exists(s -> s instanceof TapStrategy)) {
                return true;
            }
            List<SparkStrategy> with = TapStrategy.<SparkStrategy>none().$colon$colon(new TapStrategy());
            session.experimental().extraStrategies_$eq(strategies.toList().$colon$colon$colon(with));
            return true;
        } catch (RuntimeException | LinkageError e) {
            return false;  // another Spark's planner: the tap's DataFrame is scanned by Spark's RDDScanExec
        }
    }
}
