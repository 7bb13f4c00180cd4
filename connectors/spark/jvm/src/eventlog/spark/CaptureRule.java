package eventlog.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.BaseSubqueryExec;
import org.apache.spark.sql.execution.CommandResultExec;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.AQEShuffleReadExec;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.BroadcastQueryStageExec;
import org.apache.spark.sql.execution.adaptive.ShuffleQueryStageExec;
import org.apache.spark.sql.execution.command.DataWritingCommandExec;
import org.apache.spark.sql.execution.command.ExecutedCommandExec;
import org.apache.spark.sql.execution.datasources.WriteFilesExec;
import org.apache.spark.sql.execution.datasources.v2.V2CommandExec;
import org.apache.spark.sql.execution.exchange.BroadcastExchangeLike;
import org.apache.spark.sql.execution.exchange.Exchange;
import org.apache.spark.sql.execution.exchange.ReusedExchangeExec;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeLike;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The physical-plan rule of capture by configuration, run as a columnar rule's last step
 * ({@code postColumnarTransitions}): on each plan fragment exactly once and in its final form — the whole plan
 * without AQE; with AQE each query stage when it is created (after AQE's stage optimizations: coalesced and
 * skew-split shuffle reads) and the result stage last. Stages are created once and never re-planned, so an
 * operator AQE re-plans away was never wrapped, and one it keeps is wrapped once: re-planning neither
 * duplicates nor loses a captured row. Within a SQL execution only (an {@code explain()} captures nothing), the
 * rule numbers the fragment's operators (children first) and wraps each chosen one in a {@link CaptureExec}.
 * Operators whose output cannot pass through a row-based node are not wrapped: columnar ones (their rows are
 * captured at the {@code ColumnarToRow} above them), broadcast exchanges (their input is captured), the query
 * stage under an AQE shuffle read (the read is), commands and writes. A failure to capture never fails the
 * query: the plan is left as it was and a warning logged.
 */
final class CaptureRule extends Rule<SparkPlan> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(CaptureRule.class);
    private static final Set<String> WARNED = ConcurrentHashMap.newKeySet();
    private final transient SparkSession session;

    CaptureRule(SparkSession session) {
        this.session = session;
    }

    static void warn(String message) {
        if (WARNED.size() < 1000 && WARNED.add(message)) {
            LOG.warn("eventlog capture: " + message);
        }
    }

    @Override
    public SparkPlan apply(SparkPlan plan) {
        CaptureSettings settings;
        try {
            settings = CaptureSettings.of(session);
        } catch (RuntimeException e) {
            warn(e.getMessage());
            return plan;
        }
        if (settings == null) {
            return plan;
        }
        String batch = session.sparkContext().getLocalProperty(CaptureStreaming.BATCH_ID);
        String streamingQuery = session.sparkContext().getLocalProperty(CaptureStreaming.QUERY_ID);
        if (batch != null && streamingQuery != null
                && session.sparkContext().getLocalProperty(SQLExecution.EXECUTION_ID_KEY()) == null) {
            return microBatch(plan, settings, streamingQuery, batch);
        }
        if (skipped(plan)) {
            return plan;
        }
        String root = session.sparkContext().getLocalProperty(SQLExecution.EXECUTION_ROOT_ID_KEY());
        String execution = root != null ? root : session.sparkContext().getLocalProperty(SQLExecution.EXECUTION_ID_KEY());
        if (execution == null) {
            return plan;  // planned outside an execution (explain, a cached plan): nothing runs, nothing captured
        }
        try {
            CaptureQuery query = CaptureQuery.forExecution(session, settings, execution);
            SparkPlan out = wrap(plan, null, true, query, settings);
            if (!(plan instanceof Exchange)) {
                query.finish(out);  // the result stage (or the whole plan): the plan document is complete
            }
            return out;
        } catch (Exception e) {
            warn("query not captured: " + e);
            return plan;
        }
    }

    /**
     * The plan of a Structured Streaming micro-batch ({@code batchId}), prepared outside a SQL execution: its
     * chosen operators are captured at time {@code batchId} into the query's streams ({@link CaptureStreaming}).
     * The sink's write node at its root is left as it is (its input is wrapped); continuous processing is not
     * captured.
     */
    private SparkPlan microBatch(SparkPlan plan, CaptureSettings settings, String queryId, String batchId) {
        if ("true".equals(session.sparkContext().getLocalProperty(CaptureStreaming.CONTINUOUS))) {
            warn("continuous-processing query " + queryId + " not captured (micro-batch queries only)");
            return plan;
        }
        if (plan.find(p -> p instanceof AdaptiveSparkPlanExec).isDefined()) {
            return plan;
        }
        try {
            long t = Long.parseLong(batchId);
            String group = session.sparkContext().getLocalProperty(CaptureStreaming.JOB_GROUP);
            String run = (group == null ? "run" : group).replaceAll("[^A-Za-z0-9]", "");
            CaptureStreaming streaming = CaptureStreaming.of(session, settings, queryId);
            streaming.beginBatch(t, run);
            CaptureQuery query = CaptureQuery.forMicroBatch(session, streaming, t, run);
            SparkPlan out = wrap(plan, null, true, query, settings);
            query.finish(out);
            return out;
        } catch (Exception e) {
            warn("streaming query " + queryId + " micro-batch " + batchId + " not captured: " + e);
            return plan;
        }
    }

    /** Fragments the rule leaves alone: commands, and plans holding an adaptive plan (its stages come later). */
    private static boolean skipped(SparkPlan plan) {
        if (plan instanceof ExecutedCommandExec || plan instanceof CommandResultExec || plan instanceof V2CommandExec) {
            return true;
        }
        return plan.find(p -> p instanceof AdaptiveSparkPlanExec).isDefined();
    }

    private SparkPlan wrap(SparkPlan plan, SparkPlan parent, boolean top, CaptureQuery query, CaptureSettings s) {
        if (plan instanceof CaptureExec) {
            return plan;  // prepared before: wrapped once only
        }
        SparkPlan node = plan;
        List<SparkPlan> kids = CollectionConverters.asJava(plan.children());
        if (!kids.isEmpty()) {
            List<SparkPlan> wrapped = new ArrayList<>(kids.size());
            boolean changed = false;
            for (SparkPlan c : kids) {
                SparkPlan w = wrap(c, plan, false, query, s);
                changed |= w != c;
                wrapped.add(w);
            }
            if (changed) {
                node = plan.withNewChildren(CollectionConverters.asScala(wrapped).toList());
            }
        }
        int id = query.idOf(node);
        if (id < 0 && !(node instanceof ShuffleQueryStageExec)) {
            return node;
        }
        if (!chosen(node, parent, id, s)) {
            return node;
        }
        String why = unwrappable(node, parent, top);
        if (why != null) {
            if (id >= 0) {
                query.note(id, why);
            }
            return node;
        }
        SparkPlan named = id >= 0 ? node : ((ShuffleQueryStageExec) node).plan();  // a stage: its exchange's id
        CaptureQuery.Op op = query.op(node, query.idOf(named), CaptureQuery.operatorName(named));
        return op == null ? node : new CaptureExec(node, op);
    }

    /** Whether the settings choose {@code node}. */
    private static boolean chosen(SparkPlan node, SparkPlan parent, int id, CaptureSettings s) {
        if (s.all || s.ids.contains(id)) {
            return true;
        }
        if (s.exchanges && exchangeOutput(node, parent)) {
            return true;
        }
        if (s.names.isEmpty()) {
            return false;
        }
        return s.names.contains(CaptureSettings.normal(node.nodeName()))
            || s.names.contains(CaptureSettings.normal(node.getClass().getSimpleName()));
    }

    /** Whether {@code node}'s rows are an exchange's output: a shuffle's read side, or a broadcast's input. */
    static boolean exchangeOutput(SparkPlan node, SparkPlan parent) {
        return node instanceof ShuffleExchangeLike || node instanceof AQEShuffleReadExec
            || node instanceof ShuffleQueryStageExec || node instanceof ReusedExchangeExec
            || parent instanceof BroadcastExchangeLike;
    }

    /** Why {@code node} cannot be wrapped in a row-based pass-through node, or null. */
    static String unwrappable(SparkPlan node, SparkPlan parent, boolean top) {
        if (node instanceof BroadcastExchangeLike || node instanceof BroadcastQueryStageExec
                || node instanceof ReusedExchangeExec && ((ReusedExchangeExec) node).child() instanceof BroadcastExchangeLike) {
            return "a broadcast: its input is captured";
        }
        if (top && node instanceof Exchange) {
            return "a stage's exchange: captured where read";
        }
        if (node.supportsColumnar()) {
            return "columnar: captured at its ColumnarToRow";
        }
        if (parent instanceof AQEShuffleReadExec) {
            return "under an AQE shuffle read: the read is captured";
        }
        if (node instanceof AdaptiveSparkPlanExec || node instanceof BaseSubqueryExec
                || node instanceof DataWritingCommandExec || node instanceof ExecutedCommandExec
                || node instanceof CommandResultExec || node instanceof V2CommandExec || node instanceof WriteFilesExec) {
            return "a command, write or subquery";
        }
        return null;
    }
}
