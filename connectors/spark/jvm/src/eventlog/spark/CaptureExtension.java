package eventlog.spark;

import java.io.Serializable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.ColumnarRule;
import org.apache.spark.sql.execution.SparkPlan;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Capture by configuration: {@code spark.sql.extensions=eventlog.spark.CaptureExtension} (with the package's jar
 * in {@code spark.jars}) and {@code spark.eventlog.capture.dir} set, the chosen physical operators of every
 * query the session runs are captured into that file log without a change to the query's code (the settings:
 * {@link CaptureSettings}); a Structured Streaming query's micro-batches are captured each at its batch id
 * ({@link CaptureStreaming}). The log may be on S3 ({@code s3://bucket/prefix}) for batch queries. It injects {@link CaptureRule} as the last step of the session's columnar rules,
 * which Spark runs on each plan fragment once, in its final form (AQE: each query stage when it is created).
 */
public final class CaptureExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit>
        implements Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectColumnar(new AbstractFunction1<SparkSession, ColumnarRule>() {
            @Override
            public ColumnarRule apply(SparkSession session) {
                return new Columnar(session);
            }
        });
        return BoxedUnit.UNIT;
    }

    /** The columnar rule whose {@code postColumnarTransitions} is {@link CaptureRule}. */
    private static final class Columnar extends ColumnarRule {
        private final CaptureRule rule;

        Columnar(SparkSession session) {
            this.rule = new CaptureRule(session);
        }

        @Override
        public Rule<SparkPlan> postColumnarTransitions() {
            return rule;
        }
    }
}
