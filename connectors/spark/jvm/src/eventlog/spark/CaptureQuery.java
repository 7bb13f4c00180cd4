package eventlog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.trees.TreeNodeTag;
import org.apache.spark.sql.execution.InputAdapter;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.WholeStageCodegenExec;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.QueryStageExec;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One captured query (a SQL execution, with the plan fragments AQE prepares for it one stage at a time): its
 * name, the ids of its operators (numbered in the order the fragments are prepared, each fragment children
 * first: an operator's inputs have lower ids), the streams of its captured operators, created on the driver when
 * an operator's output is first computed, and its plan document ({@code <log>/_plans/<query>.json}), written
 * when a fragment that ends the query (not an exchange's) is prepared.
 */
final class CaptureQuery {
    /** The tag holding an operator's id in the plan (copied with the node by Spark's transformations). */
    static final TreeNodeTag<Object> ID = new TreeNodeTag<>("eventlog.capture.id");
    static final String PLANS_DIR = "_plans";
    static final int SEGMENT_BYTES = 64 << 20;
    static final int EVENT_ROWS = 65536;
    static final long EVENT_BYTES = 16L << 20;
    private static final int KEEP = 256;
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final AtomicInteger COUNT = new AtomicInteger();
    private static final Map<String, CaptureQuery> QUERIES = new LinkedHashMap<String, CaptureQuery>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, CaptureQuery> eldest) {
            return size() > KEEP;
        }
    };

    final String name;
    final String root;
    final String execution;
    private final String spark;
    private final String application;
    private final String created = StreamHeaderJson.now();
    private int nextId = 1;
    private final List<SparkPlan> finals = new ArrayList<>();
    private final Map<String, Op> made = new LinkedHashMap<>();
    private final Map<String, Op> opened = new LinkedHashMap<>();
    private final Map<Integer, String> notes = new TreeMap<>();
    /** The S3 store the log is on (its settings {@link #storeSettings}), or null for a local file log. */
    private ObjectStore store;
    private String[] storeSettings;
    /** The streaming query of a micro-batch's plan ({@link #forMicroBatch}), or null. */
    final CaptureStreaming streaming;
    /** The micro-batch (its time), with {@link #streaming}. */
    final long batch;
    /** The streaming query's run, with {@link #streaming}. */
    final String run;

    private CaptureQuery(String name, String root, String execution, String spark, String application) {
        this(name, root, execution, spark, application, null, 0, null);
    }

    private CaptureQuery(String name, String root, String execution, String spark, String application,
                         CaptureStreaming streaming, long batch, String run) {
        this.name = name;
        this.root = root;
        this.execution = execution;
        this.spark = spark;
        this.application = application;
        this.streaming = streaming;
        this.batch = batch;
        this.run = run;
    }

    /**
     * The plan of micro-batch {@code batch} of a streaming query (run {@code run}): operators numbered afresh
     * in each micro-batch (the same plan, the same ids), streams shared by all micro-batches
     * ({@link CaptureStreaming}); the plan document {@code <query>.json} is the latest micro-batch's.
     */
    static CaptureQuery forMicroBatch(SparkSession session, CaptureStreaming streaming, long batch, String run)
            throws IOException {
        CaptureQuery q = new CaptureQuery(streaming.name, streaming.root, "batch " + batch, session.version(),
            session.sparkContext().applicationId(), streaming, batch, run);
        q.store = streaming.store;
        q.storeSettings = streaming.storeSettings;
        return q;
    }

    /** The query of SQL execution {@code execution} (registered at its first fragment, its name claimed then). */
    static CaptureQuery forExecution(SparkSession session, CaptureSettings settings, String execution)
            throws IOException {
        String key = session.sparkContext().applicationId() + "/" + execution + "/"
            + (settings.store == null ? "" : "s3://" + settings.store[2] + "/") + settings.root;
        synchronized (QUERIES) {
            CaptureQuery q = QUERIES.get(key);
            if (q == null) {
                String base = settings.query != null ? streamName(settings.query) : "q" + COUNT.incrementAndGet();
                ObjectStore store = ObjectStore.of(settings.store);
                q = new CaptureQuery(claim(settings.root, store, base), settings.root, execution, session.version(),
                    session.sparkContext().applicationId());
                q.store = store;
                q.storeSettings = settings.store;
                q.writePlan();
                QUERIES.put(key, q);
            }
            return q;
        }
    }

    /** {@code s} as a stream name: characters other than {@code A-Za-z0-9._-} become {@code _}. */
    static String streamName(String s) {
        String out = s.replaceAll("[^A-Za-z0-9._-]", "_");
        if (out.isEmpty() || !Character.isLetterOrDigit(out.charAt(0))) {
            out = "q" + out;
        }
        return out.length() > 100 ? out.substring(0, 100) : out;
    }

    /** Claim the first of {@code base}, {@code base-2}, … whose plan document does not exist (created empty). */
    private static String claim(String root, ObjectStore store, String base) throws IOException {
        if (store != null) {  // an exclusive create of the empty document
            Path empty = Files.createTempFile("eventlog-plan", ".json");
            try {
                for (int i = 1; i < 10000; i++) {
                    String name = i == 1 ? base : base + "-" + i;
                    if (store.put(key(root, PLANS_DIR + "/" + name + ".json"), empty, true)) {
                        return name;
                    }
                }
            } finally {
                Files.deleteIfExists(empty);
            }
            throw new IOException("no free query name like " + base + " in " + store.display(key(root, PLANS_DIR)));
        }
        Path plans = Paths.get(root, PLANS_DIR);
        PartCapture.createDirectories(plans);
        for (int i = 1; i < 10000; i++) {
            String name = i == 1 ? base : base + "-" + i;
            try {
                Files.createFile(plans.resolve(name + ".json"));
                return name;
            } catch (FileAlreadyExistsException e) {
                // taken by an earlier query (or run) into this log
            }
        }
        throw new IOException("no free query name like " + base + " in " + plans);
    }

    // -- operator ids --------------------------------------------------------------------------------------

    /** The id of {@code node}, given now (the next one) if it has none; -1 for nodes that are no operator. */
    synchronized int idOf(SparkPlan node) {
        if (transparent(node)) {
            return -1;
        }
        scala.Option<Object> tag = node.getTagValue(ID);
        if (tag.isDefined()) {
            return (Integer) tag.get();
        }
        int id = nextId++;
        node.setTagValue(ID, id);
        return id;
    }

    /** Nodes the plan document looks through: query stages (their plans are shown), codegen wrappers. */
    static boolean transparent(SparkPlan node) {
        return node instanceof QueryStageExec || node instanceof WholeStageCodegenExec
            || node instanceof InputAdapter || node instanceof AdaptiveSparkPlanExec || node instanceof CaptureExec;
    }

    synchronized void note(int id, String why) {
        notes.putIfAbsent(id, why);
    }

    // -- captured operators -------------------------------------------------------------------------------

    /** What a captured operator's tasks need: its stream, its columns; the stream is made by {@link #open}. */
    static final class Op implements Serializable {
        private static final long serialVersionUID = 1L;
        final int id;
        final String stream;
        /** The output as captured: the operator's columns, a repeated name (or {@code _time}, {@code _seq}) with a
         * suffix {@code _2}, {@code _3}, …. */
        final StructType schema;
        final transient List<Field> fields;
        final transient CaptureQuery query;
        private transient TapSpec spec;
        private transient boolean tried;

        Op(CaptureQuery query, int id, String stream, StructType schema, List<Field> fields) {
            this.query = query;
            this.id = id;
            this.stream = stream;
            this.schema = schema;
            this.fields = fields;
        }

        /** The tap of the operator's output in {@code partitions} partitions, its stream created now (null
         * when it cannot be: the stream exists, or the log cannot be written; the rows then pass uncaptured). */
        synchronized TapSpec open(int partitions) {
            if (!tried) {
                tried = true;
                try {
                    spec = query.streaming != null ? query.streaming.spec(this, partitions, query.batch, query.run)
                        : query.create(this, partitions);
                    if (spec != null && query.streaming != null) {
                        synchronized (query) {
                            query.opened.put(stream, this);
                        }
                    }
                } catch (IOException | RuntimeException e) {
                    query.note(id, "not captured: " + e);
                    CaptureRule.warn("could not create stream " + stream + " in " + query.root + ": " + e);
                }
            }
            return spec;
        }
    }

    /**
     * The captured form of {@code node}'s output as operator {@code id} named {@code operator}, or null (with a note saying why) when its columns cannot be
     * captured (a type the tap does not write, no column).
     */
    synchronized Op op(SparkPlan node, int id, String operator) {
        List<Attribute> attrs = CollectionConverters.asJava(node.output());
        if (attrs.isEmpty()) {
            notes.putIfAbsent(id, "no column to capture");
            return null;
        }
        Set<String> used = new HashSet<>();
        used.add("_time");
        used.add("_seq");
        for (Attribute a : attrs) {
            used.add(a.name());
        }
        Set<String> taken = new HashSet<>();
        taken.add("_time");
        taken.add("_seq");
        List<StructField> out = new ArrayList<>();
        for (Attribute a : attrs) {
            String n = a.name();
            for (int k = 2; taken.contains(n); k++) {  // a join's two "id"s: id, id_2 (the same in every run)
                n = a.name() + "_" + k;
                if (used.contains(n) && !n.equals(a.name())) {
                    n = a.name();  // a column of the operator has that name: try the next
                }
            }
            taken.add(n);
            out.add(new StructField(n, a.dataType(), a.nullable(), Metadata.empty()));
        }
        StructType schema = DataTypes.createStructType(out);
        try {
            Schema arrow = ArrowUtils.toArrowSchema(schema, "UTC", true);  // the overload Spark 4.2 and 4.3 share (large types off)
            List<Field> fields = arrow.getFields();
            String why = JvmTap.unsupported(segmentSchema(fields), schema);
            if (why != null) {
                notes.putIfAbsent(id, "not captured: " + why);
                return null;
            }
            String stream = name + "." + id + "-" + operator;
            Op known = made.get(stream);  // an operator read twice (a reused query stage): one stream
            if (known == null) {
                known = new Op(this, id, stream, schema, fields);
                made.put(stream, known);
            }
            return known;
        } catch (IOException | RuntimeException e) {
            notes.putIfAbsent(id, "not captured: " + e.getMessage());
            return null;
        }
    }

    /** The operator's name as a stream name's tail ({@code HashAggregate}, {@code Scan_parquet}). */
    static String operatorName(SparkPlan node) {
        String n = node.nodeName().replaceAll("[^A-Za-z0-9._-]+", "_").replaceAll("^_+|_+$", "");
        if (n.isEmpty()) {
            n = node.getClass().getSimpleName();
        }
        return n.length() > 40 ? n.substring(0, 40) : n;
    }

    static byte[] segmentSchema(List<Field> fields) throws IOException {
        List<Field> all = new ArrayList<>(fields);
        all.add(Field.notNullable("_time", new ArrowType.Int(64, true)));
        all.add(Field.notNullable("_seq", new ArrowType.Int(64, true)));
        return StreamHeaderJson.schemaMessage(all);
    }

    /** The key of {@code rel} (a path below the log's root) on the store. */
    static String key(String root, String rel) {
        return root.isEmpty() ? rel : root + "/" + rel;
    }

    /** Put {@code data} at {@code rel} below the log's root on the store (only where nothing is: {@code
     * exclusive}); false when something was. */
    private boolean putBytes(String rel, byte[] data, boolean exclusive) throws IOException {
        Path tmp = Files.createTempFile("eventlog-capture", ".json");
        try {
            Files.write(tmp, data);
            return store.put(key(root, rel), tmp, exclusive);
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    /** Create {@code op}'s stream with {@code partitions} parts (one empty finished part for none). */
    private TapSpec create(Op op, int partitions) throws IOException {
        int peers = Math.max(partitions, 1);
        String when = StreamHeaderJson.now();
        byte[] header = StreamHeaderJson.header(op.stream, peers, op.fields, when);
        if (store != null) {
            if (!putBytes(op.stream + "/_header.json", header, true)) {
                throw new IOException("stream " + op.stream + " exists in " + store.display(root) + " (captured before)");
            }
        } else {
            Path dir = Paths.get(root, op.stream);
            PartCapture.createDirectories(dir);
            try {
                Files.write(dir.resolve("_header.json"), header, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
            } catch (FileAlreadyExistsException e) {
                throw new IOException("stream " + op.stream + " exists in " + root + " (captured before)");
            }
        }
        byte[] nonce = new byte[8];
        RANDOM.nextBytes(nonce);
        TapSpec spec = new TapSpec(root, op.stream, PartCapture.hex(nonce), peers, segmentSchema(op.fields),
            StreamHeaderJson.header(op.stream, 1, op.fields, when), -1, 0, "0", SEGMENT_BYTES, EVENT_ROWS,
            EVENT_BYTES, store == null, storeSettings);
        synchronized (this) {
            opened.put(op.stream, op);
        }
        if (partitions == 0) {
            new PartCapture(spec, 0, 0).finish();  // no task will run: the stream is one empty, finished part
        }
        return spec;
    }

    // -- the plan document --------------------------------------------------------------------------------

    /** A fragment that ends the query (or one of its subqueries) was prepared: record the plan it completes. */
    synchronized void finish(SparkPlan fragment) {
        finals.add(fragment);
        try {
            writePlan();
        } catch (IOException | RuntimeException e) {
            CaptureRule.warn("could not write the plan of query " + name + " in " + root + ": " + e);
        }
    }

    private void writePlan() throws IOException {
        Map<Integer, Map<String, Object>> ops = new TreeMap<>();
        List<Object> roots = new ArrayList<>();
        for (SparkPlan f : finals) {
            roots.addAll(visit(f, null, null, ops));
        }
        Set<String> shown = new HashSet<>();
        for (Map<String, Object> op : ops.values()) {
            Object why = notes.get((Integer) op.get("id"));
            if (why != null && op.get("stream") == null) {
                op.put("note", why);
            }
            if (op.get("stream") != null) {
                shown.add((String) op.get("stream"));
            }
        }
        List<Object> unused = new ArrayList<>();
        for (String s : opened.keySet()) {
            if (!shown.contains(s)) {
                unused.add(s);
            }
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("format", "eventlog-plan");
        doc.put("version", 1);
        doc.put("query", name);
        doc.put("application", application);
        doc.put("execution", execution);
        doc.put("spark", spark);
        doc.put("created", created);
        doc.put("time", streaming != null ? batch : 0);
        if (streaming != null) {  // the latest micro-batch's plan: each micro-batch is its time
            Map<String, Object> st = new LinkedHashMap<>();
            st.put("id", streaming.queryId);
            st.put("run", run);
            st.put("batch", batch);
            doc.put("streaming", st);
        }
        doc.put("roots", roots);
        doc.put("operators", new ArrayList<Object>(ops.values()));
        doc.put("unused_streams", unused);
        if (store != null) {  // a put replaces the object whole
            putBytes(PLANS_DIR + "/" + name + ".json", (CanonicalJson.write(doc) + "\n").getBytes(StandardCharsets.UTF_8),
                false);
            return;
        }
        Path plans = Paths.get(root, PLANS_DIR);
        Path tmp = plans.resolve("." + name + ".json." + PartCapture.hex(new byte[] {(byte) RANDOM.nextInt()})
            + ".tmp");
        Files.write(tmp, (CanonicalJson.write(doc) + "\n").getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, plans.resolve(name + ".json"), StandardCopyOption.ATOMIC_MOVE,
            StandardCopyOption.REPLACE_EXISTING);
    }

    /**
     * The operators of {@code node}'s subtree into {@code ops} (by id); returns the ids of the operators
     * {@code node} stands for (itself, or for a node the document looks through, the operators below it).
     */
    private List<Integer> visit(SparkPlan node, Integer stage, String stream, Map<Integer, Map<String, Object>> ops) {
        if (node instanceof CaptureExec) {
            CaptureExec c = (CaptureExec) node;
            return visit(c.child(), stage, c.op().stream, ops);
        }
        if (node instanceof QueryStageExec) {
            QueryStageExec s = (QueryStageExec) node;
            return visit(s.plan(), s.id(), stream, ops);
        }
        if (node instanceof AdaptiveSparkPlanExec) {
            return visit(((AdaptiveSparkPlanExec) node).executedPlan(), stage, stream, ops);
        }
        if (node instanceof WholeStageCodegenExec || node instanceof InputAdapter) {
            return visit(node.children().head(), stage, stream, ops);
        }
        int id = idOf(node);
        Map<String, Object> op = ops.get(id);
        if (op == null) {
            op = new LinkedHashMap<>();
            op.put("id", id);
            op.put("name", node.nodeName());
            op.put("type", node.getClass().getSimpleName());
            String detail = node.simpleString(25);
            op.put("detail", detail.length() > 2000 ? detail.substring(0, 2000) + "…" : detail);
            op.put("stage", stage);
            List<Object> columns = new ArrayList<>();
            for (Attribute a : CollectionConverters.asJava(node.output())) {
                columns.add(a.name());
            }
            op.put("columns", columns);
            op.put("stream", null);
            ops.put(id, op);
            List<Object> children = new ArrayList<>();
            for (SparkPlan c : CollectionConverters.asJava(node.children())) {
                children.addAll(visit(c, stage, null, ops));
            }
            op.put("children", children);
        }
        if (stream != null) {
            op.put("stream", stream);
        }
        List<Integer> self = new ArrayList<>();
        self.add(id);
        return self;
    }
}
