package eventlog.spark;

import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQueryListener;

/**
 * Capture by configuration of a Structured Streaming query (micro-batch execution): each micro-batch is a time
 * (its batch id), each chosen operator one stream {@code <query>.<id>-<operator>} for the whole query, named
 * after the streaming query's name (else its id) and the operator's id in the micro-batch's plan.
 *
 * <p>A micro-batch is recognized when its plan is prepared: Spark prepares it outside a SQL execution with the
 * local properties {@code streaming.sql.batchId} and {@code sql.streaming.queryId} set. The tasks of batch
 * {@code t} write each partition's events at time {@code t}, numbered from the part's next sequence id, and a
 * Progress event moving the part's frontier to {@code t + 1}; the first attempt that reads its whole partition
 * claims it ({@code <log>/.staging/<stream>/b<t>-<run>/part=<p>}, an atomic rename: retried and racing attempts
 * keep nothing). Spark commits a batch (its checkpoint's commit log) only when its job succeeded, and plans batch
 * {@code t} only once every batch before it is committed; the driver appends batch {@code s}'s claimed parts to
 * the stream (moving their sealed segments into the parts, a part without a partition given an empty one) when
 * it sees {@code s} committed: when the next batch is prepared, or on the query's progress event once the commit
 * log holds {@code s}. The last batch appended and the parts' next sequence ids are the query's state file
 * {@code <log>/_plans/<query>.state}, rewritten atomically after each append, so a restarted driver continues
 * where it stopped: a batch appended before is never appended again, a batch staged by a run that failed
 * before committing it is dropped (Spark runs it again).
 *
 * <p>On an S3 store ({@code s3://bucket/prefix}) the same, with objects: an attempt uploads its sealed segments
 * below {@code <log>/.staging/<stream>/b<t>-<run>/<p>-<attempt>-<nonce>/} and claims the partition by an exclusive
 * put of {@code .../part=<p>} naming that folder ({@link PartCapture#claimKey}); the driver appends a claimed part
 * by putting its segments at the part's keys by exclusive creates (one there with the same bytes is an interrupted
 * append's), rewrites the state object, then deletes the batch's staging objects. {@code _spec} is an object read
 * back only through {@link StagedBatch}'s filtered read.
 *
 * <p>An operator whose partition count grows beyond its stream's parts (fixed at its first micro-batch), or a
 * committed batch with a partition nobody claimed (its output was not read to the end), stops that stream: its
 * frontier stays at that batch, so no reader takes the batch as complete, and a warning says why.
 */
final class CaptureStreaming {
    static final String BATCH_ID = "streaming.sql.batchId";
    static final String QUERY_ID = "sql.streaming.queryId";
    static final String CONTINUOUS = "__is_continuous_processing";
    static final String JOB_GROUP = "spark.jobGroup.id";
    private static final String STATE_MAGIC = "eventlog-streaming-capture 1";
    private static final Pattern JOB = Pattern.compile("b(\\d{20})-([A-Za-z0-9]+)");
    private static final Pattern SEALED = Pattern.compile("(\\d{20})\\.arrow");
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final Map<String, CaptureStreaming> QUERIES = new HashMap<>();
    private static SparkContext listening;

    final String root;
    /** The S3 store the log is on ({@link #storeSettings}), or null for a local file log. */
    final ObjectStore store;
    final String[] storeSettings;
    final String queryId;
    final String name;
    private final Object execution;  // the StreamExecution (its commit log), or null
    private final Map<String, State> streams = new TreeMap<>();

    /** What the driver knows of one captured stream. */
    private static final class State {
        int peers;
        long batch = -1;
        long[] next;
        String stopped;
    }

    private CaptureStreaming(String root, String[] storeSettings, String queryId, String name, Object execution) {
        this.root = root;
        this.storeSettings = storeSettings;
        this.store = ObjectStore.of(storeSettings);
        this.queryId = queryId;
        this.name = name;
        this.execution = execution;
    }

    /** The capture of streaming query {@code queryId} into the settings' log (its name claimed, state loaded). */
    static CaptureStreaming of(SparkSession session, CaptureSettings settings, String queryId) throws IOException {
        String key = (settings.store == null ? "" : "s3://" + settings.store[2] + "/") + settings.root + "\n" + queryId;
        synchronized (QUERIES) {
            CaptureStreaming s = QUERIES.get(key);
            Object execution = activeQuery(session, queryId);
            if (s == null || s.execution != execution) {  // first seen, or restarted (a new StreamExecution)
                String base = null;
                if (execution != null) {
                    Object n = call(execution, "name");
                    base = n instanceof String && !((String) n).isBlank() ? (String) n : null;
                }
                if (base == null) {
                    base = settings.query != null ? settings.query : queryId;
                }
                ObjectStore store = ObjectStore.of(settings.store);
                String name = store == null ? claim(settings.root, CaptureQuery.streamName(base), queryId)
                    : claim(store, settings.root, CaptureQuery.streamName(base), queryId);
                s = new CaptureStreaming(settings.root, settings.store, queryId, name, execution);
                s.load();
                QUERIES.put(key, s);
            }
            listen(session.sparkContext());
            return s;
        }
    }

    private static Object activeQuery(SparkSession session, String queryId) {
        try {
            Object shared = call(session, "sharedState");
            Object active = call(shared, "activeStreamingQueries");
            return active instanceof Map ? ((Map<?, ?>) active).get(UUID.fromString(queryId)) : null;
        } catch (RuntimeException e) {
            return null;
        }
    }

    private static Object call(Object target, String method, Object... args) {
        try {
            for (Method m : target.getClass().getMethods()) {
                if (m.getName().equals(method) && m.getParameterCount() == args.length) {
                    return m.invoke(target, args);
                }
            }
            return null;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /** The first of {@code base}, {@code base-2}, … free or already this query's (its state file names it). */
    private static String claim(String root, String base, String queryId) throws IOException {
        Path plans = Paths.get(root, CaptureQuery.PLANS_DIR);
        PartCapture.createDirectories(plans);
        for (int i = 1; i < 10000; i++) {
            String n = i == 1 ? base : base + "-" + i;
            Path state = plans.resolve(n + ".state");
            try {
                Files.write(state, (STATE_MAGIC + "\nquery-id " + queryId + "\n").getBytes(StandardCharsets.UTF_8),
                    StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
                if (!Files.exists(plans.resolve(n + ".json"))) {
                    return n;
                }
                Files.delete(state);  // a batch query's name
            } catch (FileAlreadyExistsException e) {
                List<String> lines = Files.readAllLines(state, StandardCharsets.UTF_8);
                if (lines.size() > 1 && lines.get(1).equals("query-id " + queryId)) {
                    return n;  // this query's, from an earlier run
                }
            }
        }
        throw new IOException("no free query name like " + base + " in " + plans);
    }

    /** {@link #claim(String, String, String)} on a store: the state object is created by an exclusive put. */
    private static String claim(ObjectStore store, String root, String base, String queryId) throws IOException {
        Path tmp = Files.createTempFile("eventlog-state", ".txt");
        try {
            Files.write(tmp, (STATE_MAGIC + "\nquery-id " + queryId + "\n").getBytes(StandardCharsets.UTF_8));
            for (int i = 1; i < 10000; i++) {
                String n = i == 1 ? base : base + "-" + i;
                String state = CaptureQuery.key(root, CaptureQuery.PLANS_DIR + "/" + n + ".state");
                if (store.put(state, tmp, true)) {
                    if (!store.exists(CaptureQuery.key(root, CaptureQuery.PLANS_DIR + "/" + n + ".json"))) {
                        return n;
                    }
                    store.delete(state);  // a batch query's name
                } else {
                    byte[] got = store.get(state, STATE_BYTES);
                    String[] lines = got == null ? new String[0] : new String(got, StandardCharsets.UTF_8).split("\n");
                    if (lines.length > 1 && lines[1].equals("query-id " + queryId)) {
                        return n;  // this query's, from an earlier run
                    }
                }
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
        throw new IOException("no free query name like " + base + " in "
            + store.display(CaptureQuery.key(root, CaptureQuery.PLANS_DIR)));
    }

    /** The key of {@code rel} (a path below the log's root) on the store. */
    private String key(String rel) {
        return CaptureQuery.key(root, rel);
    }

    /** Where the state is, for messages. */
    private String stateWhere() {
        return store == null ? statePath().toString()
            : store.display(key(CaptureQuery.PLANS_DIR + "/" + name + ".state"));
    }

    private Path statePath() {
        return Paths.get(root, CaptureQuery.PLANS_DIR, name + ".state");
    }

    private void load() throws IOException {
        List<String> lines;
        if (store != null) {
            byte[] got = store.get(key(CaptureQuery.PLANS_DIR + "/" + name + ".state"), STATE_BYTES);
            if (got == null) {
                throw new IOException("capture state " + stateWhere() + " is missing");
            }
            lines = Arrays.asList(new String(got, StandardCharsets.UTF_8).split("\n"));
        } else {
            lines = Files.readAllLines(statePath(), StandardCharsets.UTF_8);
        }
        if (lines.size() < 2 || !lines.get(0).equals(STATE_MAGIC) || !lines.get(1).equals("query-id " + queryId)) {
            throw new IOException("capture state " + stateWhere() + " is not this query's (" + queryId + ")");
        }
        for (String line : lines.subList(2, lines.size())) {
            String[] f = line.split(" ", 10);  // stream NAME peers N batch T next S,S,… [stopped why]
            try {
                if (f.length < 8 || !f[0].equals("stream") || !f[2].equals("peers") || !f[4].equals("batch")
                        || !f[6].equals("next") || (f.length > 8 && !f[8].equals("stopped"))) {
                    throw new IllegalArgumentException("fields");
                }
                State st = new State();
                st.peers = Integer.parseInt(f[3]);
                st.batch = Long.parseLong(f[5]);
                st.next = Arrays.stream(f[7].split(",")).mapToLong(Long::parseLong).toArray();
                st.stopped = f.length > 9 ? f[9] : null;
                if (st.next.length != st.peers) {
                    throw new IllegalArgumentException("peers");
                }
                streams.put(f[1], st);
            } catch (IllegalArgumentException e) {
                throw new IOException("capture state " + stateWhere() + " has a malformed line: " + line);
            }
        }
    }

    private void save() throws IOException {
        StringBuilder out = new StringBuilder(STATE_MAGIC).append("\nquery-id ").append(queryId).append('\n');
        for (Map.Entry<String, State> e : streams.entrySet()) {
            State st = e.getValue();
            out.append("stream ").append(e.getKey()).append(" peers ").append(st.peers).append(" batch ")
                .append(st.batch).append(" next ");
            for (int i = 0; i < st.next.length; i++) {
                out.append(i > 0 ? "," : "").append(st.next[i]);
            }
            if (st.stopped != null) {
                out.append(" stopped ").append(st.stopped.replace('\n', ' '));
            }
            out.append('\n');
        }
        if (store != null) {  // a put replaces the object whole
            Path tmp = Files.createTempFile("eventlog-state", ".txt");
            try {
                Files.write(tmp, out.toString().getBytes(StandardCharsets.UTF_8));
                store.put(key(CaptureQuery.PLANS_DIR + "/" + name + ".state"), tmp, false);
            } finally {
                Files.deleteIfExists(tmp);
            }
            return;
        }
        Path tmp = statePath().resolveSibling("." + name + ".state." + Long.toHexString(RANDOM.nextLong()) + ".tmp");
        Files.write(tmp, out.toString().getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, statePath(), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }

    // -- the driver's side of a micro-batch ----------------------------------------------------------------

    /**
     * Micro-batch {@code t} of run {@code run} is being prepared: every batch before it is committed, so the
     * staged ones are appended now; what other runs staged for {@code t} or later (a run that failed) goes.
     */
    synchronized void beginBatch(long t, String run) {
        appendStaged(t - 1, false, t, run);
    }

    /** The tap of {@code op}'s output in micro-batch {@code t} ({@code partitions} partitions), or null with a
     * note saying why it is not captured. Creates the stream at the operator's first micro-batch. */
    synchronized TapSpec spec(CaptureQuery.Op op, int partitions, long t, String run) throws IOException {
        State st = streams.get(op.stream);
        if (st == null) {
            st = new State();
            st.peers = Math.max(partitions, 1);
            st.next = new long[st.peers];
            Arrays.fill(st.next, 1);
            byte[] header = StreamHeaderJson.header(op.stream, st.peers, op.fields, StreamHeaderJson.now());
            if (store != null) {
                if (!putBytes(op.stream + "/_header.json", header, true)) {
                    throw new IOException("stream " + op.stream + " exists in " + store.display(root)
                        + " (captured by another query)");
                }
            } else {
                Path dir = Paths.get(root, op.stream);
                PartCapture.createDirectories(dir);
                try {
                    Files.write(dir.resolve("_header.json"), header, StandardOpenOption.CREATE_NEW,
                        StandardOpenOption.WRITE);
                } catch (FileAlreadyExistsException e) {
                    throw new IOException("stream " + op.stream + " exists in " + root + " (captured by another query)");
                }
            }
            streams.put(op.stream, st);
            save();
        }
        if (st.stopped != null) {
            op.query.note(op.id, "not captured from batch " + t + " on: " + st.stopped);
            return null;
        }
        if (st.batch >= t) {
            op.query.note(op.id, "batch " + t + " was captured before");
            return null;
        }
        if (partitions > st.peers) {
            stop(op.stream, st, "micro-batch " + t + " has " + partitions + " partitions, the stream " + st.peers
                + " parts");
            op.query.note(op.id, "not captured from batch " + t + " on: " + st.stopped);
            return null;
        }
        String job = "b" + PartFiles.name20(t) + "-" + run;
        TapSpec spec = new TapSpec(root, op.stream, job, st.peers, CaptureQuery.segmentSchema(op.fields),
            StreamHeaderJson.header(op.stream, 1, op.fields, StreamHeaderJson.now()), -1, 0, Long.toString(t),
            CaptureQuery.SEGMENT_BYTES, CaptureQuery.EVENT_ROWS, CaptureQuery.EVENT_BYTES, store == null, storeSettings);
        spec.startSeqs = st.next.clone();
        spec.since = st.batch + 1;
        if (store != null) {
            putBytes(PartCapture.STAGING_DIR + "/" + op.stream + "/" + job + "/_spec", StagedBatch.bytes(spec, partitions),
                false);
            return spec;
        }
        Path folder = Paths.get(root, PartCapture.STAGING_DIR, op.stream, job);
        PartCapture.createDirectories(folder);
        StagedBatch.write(folder.resolve("_spec"), spec, partitions);
        return spec;
    }

    private void stop(String stream, State st, String why) {
        st.stopped = why;
        CaptureRule.warn("stream " + stream + " in " + root + " stops at its frontier " + (st.batch + 1) + ": " + why);
        try {
            save();
        } catch (IOException e) {
            CaptureRule.warn("could not write " + stateWhere() + ": " + e);
        }
    }

    /**
     * Append the staged batches up to {@code upTo} of every stream of the query, in batch order ({@code committed}:
     * only those the checkpoint's commit log holds); with {@code from} ≥ 0, drop what runs other than {@code run}
     * staged for batches from {@code from} on.
     */
    private void appendStaged(long upTo, boolean committed, long from, String run) {
        if (store != null) {
            appendStagedObjects(upTo, committed, from, run);
            return;
        }
        Path staging = Paths.get(root, PartCapture.STAGING_DIR);
        List<String> names = new ArrayList<>();
        try (Stream<Path> all = Files.list(staging)) {
            all.map(p -> p.getFileName().toString()).filter(n -> n.startsWith(name + ".")).forEach(names::add);
        } catch (NoSuchFileException e) {
            return;
        } catch (IOException e) {
            CaptureRule.warn("could not list " + staging + ": " + e);
            return;
        }
        for (String stream : names) {
            TreeMap<Long, List<Path>> batches = new TreeMap<>();
            try (Stream<Path> jobs = Files.list(staging.resolve(stream))) {
                jobs.forEach(j -> {
                    Matcher m = JOB.matcher(j.getFileName().toString());
                    if (m.matches()) {
                        batches.computeIfAbsent(Long.parseLong(m.group(1)), k -> new ArrayList<>()).add(j);
                    }
                });
            } catch (IOException e) {
                continue;  // removed meanwhile
            }
            State st = streams.get(stream);
            for (Map.Entry<Long, List<Path>> b : batches.entrySet()) {
                long s = b.getKey();
                for (Path job : b.getValue()) {
                    boolean ours = job.getFileName().toString().endsWith("-" + run);
                    if (st == null || s <= st.batch || (from >= 0 && s >= from && !ours)) {
                        PartCapture.deleteTree(job);  // appended before, or staged by a run that failed
                    } else if (s <= upTo && (!committed || committed(s))) {
                        try {
                            append(stream, st, s, job);
                        } catch (IOException | RuntimeException e) {
                            stop(stream, st, "batch " + s + " could not be appended: " + e);
                        }
                    }
                }
            }
            removeIfEmpty(staging.resolve(stream));
        }
        removeIfEmpty(staging);
    }

    private static void removeIfEmpty(Path dir) {
        try {
            Files.delete(dir);  // only when empty: a batch being staged keeps it
        } catch (IOException e) {
            // not empty, or gone
        }
    }

    /** Whether the streaming query's commit log holds batch {@code s} (false when that cannot be told). */
    private boolean committed(long s) {
        if (execution == null) {
            return false;
        }
        Object log = call(execution, "commitLog");
        Object got = log == null ? null : call(log, "get", s);
        return got instanceof scala.Option && ((scala.Option<?>) got).isDefined();
    }

    /** Append staged batch {@code s} of {@code stream} (its job folder {@code job}) to the stream's parts. */
    private void append(String stream, State st, long s, Path job) throws IOException {
        if (st.stopped != null) {
            PartCapture.deleteTree(job);
            return;
        }
        StagedBatch staged = StagedBatch.read(job.resolve("_spec"));
        TapSpec spec = staged.spec;
        int partitions = staged.partitions;
        if (spec.since != st.batch + 1 || !Arrays.equals(spec.startSeqs, st.next)) {
            throw new IOException("staged batch " + s + " continues the stream from " + spec.since
                + ", but it is at " + (st.batch + 1));
        }
        for (int p = 0; p < st.peers; p++) {
            Path claimed = PartCapture.partDir(spec, p);
            if (!Files.isDirectory(claimed)) {
                if (p < partitions) {
                    PartCapture.deleteTree(job);
                    stop(stream, st, "partition " + p + " of micro-batch " + s + " was not captured (its output was "
                        + "not read to the end)");
                    return;
                }
                new PartCapture(spec, p, 0).finish();  // a part without a partition: its frontier moves on
            }
        }
        long[] next = new long[st.peers];
        for (int p = 0; p < st.peers; p++) {
            next[p] = moveSegments(PartCapture.partDir(spec, p), Paths.get(root, stream, "part=" + p));
        }
        st.batch = s;
        st.next = next;
        save();
        PartCapture.deleteTree(job);
    }

    /** Move the sealed segments (each with its index) of a claimed part into the stream's part {@code dst} (those
     * moved before a crash are there already); returns the part's next sequence id. */
    private static long moveSegments(Path src, Path dst) throws IOException {
        PartCapture.createDirectories(dst);
        Path lock = dst.resolve(".lock");
        if (!Files.exists(lock)) {
            Files.createFile(lock);
        }
        List<String> segments = new ArrayList<>();
        if (Files.isDirectory(src)) {
            try (Stream<Path> names = Files.list(src)) {
                names.map(p -> p.getFileName().toString()).filter(n -> SEALED.matcher(n).matches())
                    .sorted().forEach(segments::add);
            }
        }
        for (String seg : segments) {
            String index = "_" + seg.substring(0, 20) + ".index";
            if (!Files.exists(dst.resolve(seg))) {
                Files.move(src.resolve(seg), dst.resolve(seg), StandardCopyOption.ATOMIC_MOVE);
            }
            if (Files.exists(src.resolve(index)) && !Files.exists(dst.resolve(index))) {
                Files.move(src.resolve(index), dst.resolve(index), StandardCopyOption.ATOMIC_MOVE);
            }
        }
        PartFiles.syncDir(dst);
        long next = 1;
        try (Stream<Path> names = Files.list(dst)) {
            for (String n : (Iterable<String>) names.map(p -> p.getFileName().toString())::iterator) {
                Matcher m = SEALED.matcher(n);
                if (m.matches()) {
                    long first = Long.parseLong(m.group(1));
                    Path index = dst.resolve("_" + m.group(1) + ".index");
                    long events = (Files.size(index) - 16) / 32;
                    next = Math.max(next, first + events);
                }
            }
        }
        return next;
    }

    // -- on an object store ------------------------------------------------------------------------------

    /** The most bytes of a state object read back. */
    private static final long STATE_BYTES = 16L << 20;
    /** The most bytes of a claim object (the name of an attempt's folder). */
    private static final long CLAIM_BYTES = 200;
    private static final Pattern ATTEMPT = Pattern.compile("(\\d+)-(\\d+)-([0-9a-f]+)");

    /** Put {@code data} at {@code rel} below the log's root on the store (only where nothing is: {@code
     * exclusive}); false when something was. */
    private boolean putBytes(String rel, byte[] data, boolean exclusive) throws IOException {
        Path tmp = Files.createTempFile("eventlog-capture", ".bin");
        try {
            Files.write(tmp, data);
            return store.put(key(rel), tmp, exclusive);
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    /** {@link #appendStaged} on a store: the staged batches are {@code <root>/.staging/<stream>/b<t>-<run>/}. */
    private void appendStagedObjects(long upTo, boolean committed, long from, String run) {
        String staging = key(PartCapture.STAGING_DIR);
        for (Map.Entry<String, State> e : streams.entrySet()) {
            String stream = e.getKey();
            State st = e.getValue();
            TreeMap<Long, List<String>> batches = new TreeMap<>();
            try {
                for (String j : store.folders(staging + "/" + stream)) {
                    Matcher m = JOB.matcher(j);
                    if (m.matches()) {
                        batches.computeIfAbsent(Long.parseLong(m.group(1)), k -> new ArrayList<>()).add(j);
                    }
                }
            } catch (IOException ex) {
                CaptureRule.warn("could not list " + store.display(staging + "/" + stream) + ": " + ex);
                continue;
            }
            for (Map.Entry<Long, List<String>> b : batches.entrySet()) {
                long s = b.getKey();
                for (String job : b.getValue()) {
                    String prefix = staging + "/" + stream + "/" + job;
                    boolean ours = job.endsWith("-" + run);
                    if (s <= st.batch || (from >= 0 && s >= from && !ours)) {
                        deleteObjects(prefix);  // appended before, or staged by a run that failed
                    } else if (s <= upTo && (!committed || committed(s))) {
                        try {
                            appendObjects(stream, st, s, prefix);
                        } catch (IOException | RuntimeException ex) {
                            stop(stream, st, "batch " + s + " could not be appended: " + ex);
                        }
                    }
                }
            }
        }
    }

    /** Remove every object below {@code prefix} (staging: what is left when that fails is only listed again). */
    private void deleteObjects(String prefix) {
        try {
            for (String k : store.listTree(prefix)) {
                store.delete(prefix + "/" + k);
            }
        } catch (IOException e) {
            CaptureRule.warn("could not remove " + store.display(prefix) + ": " + e);
        }
    }

    /**
     * Append staged batch {@code s} of {@code stream} (its objects below {@code prefix}) to the stream's parts: each
     * claimed part's segments and indexes are put at the part's keys, each segment by an exclusive create (one
     * there already is this batch's, put by an append interrupted before the state was written, when its bytes are
     * the same), then the state is rewritten and the staging removed.
     */
    private void appendObjects(String stream, State st, long s, String prefix) throws IOException {
        if (st.stopped != null) {
            deleteObjects(prefix);
            return;
        }
        byte[] raw = store.get(prefix + "/_spec", StagedBatch.MAX_BYTES);
        if (raw == null) {
            return;  // being planned: its description is put before any task runs
        }
        StagedBatch staged = StagedBatch.read(raw, store.display(prefix + "/_spec"));
        TapSpec spec = staged.spec.on(store);
        int partitions = staged.partitions;
        if (!spec.stream.equals(stream) || !prefix.endsWith("/" + spec.job) || spec.peers != st.peers
                || spec.startSeqs == null || spec.startSeqs.length != st.peers) {
            throw new IOException("staged batch " + store.display(prefix) + " is not a micro-batch of stream "
                + stream + " with " + st.peers + " parts");
        }
        if (spec.since != st.batch + 1 || !Arrays.equals(spec.startSeqs, st.next)) {
            throw new IOException("staged batch " + s + " continues the stream from " + spec.since
                + ", but it is at " + (st.batch + 1));
        }
        String[] folders = new String[st.peers];
        for (int p = 0; p < st.peers; p++) {
            byte[] claim = store.get(PartCapture.claimKey(spec, p), CLAIM_BYTES);
            if (claim == null) {
                if (p < partitions) {
                    deleteObjects(prefix);
                    stop(stream, st, "partition " + p + " of micro-batch " + s + " was not captured (its output was "
                        + "not read to the end)");
                    return;
                }
                new PartCapture(spec, p, 0).finish();  // a part without a partition: its frontier moves on
                claim = store.get(PartCapture.claimKey(spec, p), CLAIM_BYTES);
            }
            String folder = claim == null ? "" : new String(claim, StandardCharsets.UTF_8);
            Matcher m = ATTEMPT.matcher(folder);
            if (!m.matches() || !m.group(1).equals(Integer.toString(p))) {
                throw new IOException("claim " + store.display(PartCapture.claimKey(spec, p)) + " of stream " + stream
                    + " part " + p + " does not name an attempt of that partition");
            }
            folders[p] = folder;
        }
        long[] next = new long[st.peers];
        for (int p = 0; p < st.peers; p++) {
            next[p] = copySegments(stream, p, prefix + "/" + folders[p], st.next[p]);
        }
        st.batch = s;
        st.next = next;
        save();
        deleteObjects(prefix);
    }

    /** Put the sealed segments (each with its index) below {@code src} at part {@code p}'s keys; returns the
     * part's next sequence id (the staged part's first is {@code first}). */
    private long copySegments(String stream, int p, String src, long first) throws IOException {
        List<String> names = store.list(src);
        String dst = key(stream + "/part=" + p);
        long next = first;
        boolean any = false;
        for (String seg : names) {
            Matcher m = SEALED.matcher(seg);
            if (!m.matches()) {
                continue;
            }
            long at = Long.parseLong(m.group(1));
            if (at < first) {
                throw new IOException("segment " + store.display(src + "/" + seg) + " of stream " + stream + " part "
                    + p + " starts before the part's next sequence id " + first);
            }
            String index = "_" + m.group(1) + ".index";
            Path tmp = Files.createTempFile("eventlog-segment", ".arrow");
            try {
                if (!store.download(src + "/" + seg, tmp, Long.MAX_VALUE)) {
                    throw new IOException("segment " + store.display(src + "/" + seg) + " of stream " + stream
                        + " part " + p + " vanished");
                }
                if (!store.put(dst + "/" + seg, tmp, true)) {
                    byte[] there = store.get(dst + "/" + seg, Files.size(tmp));
                    if (there == null || !Arrays.equals(there, Files.readAllBytes(tmp))) {
                        throw new IOException("segment " + store.display(dst + "/" + seg) + " of stream " + stream
                            + " part " + p + " exists with other bytes (a writer outside this capture?)");
                    }
                }
                byte[] idx = store.get(src + "/" + index, 1L << 30);
                if (idx != null) {
                    if (idx.length < 16 || (idx.length - 16) % 32 != 0) {
                        throw new IOException("index " + store.display(src + "/" + index) + " of stream " + stream
                            + " part " + p + " has " + idx.length + " bytes, not 16 + 32 per event");
                    }
                    Files.write(tmp, idx);
                    store.put(dst + "/" + index, tmp, false);
                    next = Math.max(next, at + (idx.length - 16) / 32);
                } else {
                    throw new IOException("segment " + store.display(src + "/" + seg) + " of stream " + stream
                        + " part " + p + " has no index");
                }
                any = true;
            } finally {
                Files.deleteIfExists(tmp);
            }
        }
        if (!any) {
            throw new IOException("claimed part " + store.display(src) + " of stream " + stream + " part " + p
                + " holds no segment");
        }
        return next;
    }

    // -- progress events ----------------------------------------------------------------------------------

    private static synchronized void listen(SparkContext sc) {
        if (listening == sc) {
            return;
        }
        listening = sc;
        sc.addSparkListener(new SparkListener() {
            @Override
            public void onOtherEvent(SparkListenerEvent event) {
                String id;
                long upTo;
                if (event instanceof StreamingQueryListener.QueryProgressEvent) {
                    id = ((StreamingQueryListener.QueryProgressEvent) event).progress().id().toString();
                    upTo = ((StreamingQueryListener.QueryProgressEvent) event).progress().batchId();
                } else if (event instanceof StreamingQueryListener.QueryTerminatedEvent) {
                    id = ((StreamingQueryListener.QueryTerminatedEvent) event).id().toString();
                    upTo = Long.MAX_VALUE;
                } else {
                    return;
                }
                List<CaptureStreaming> mine = new ArrayList<>();
                synchronized (QUERIES) {
                    for (CaptureStreaming s : QUERIES.values()) {
                        if (s.queryId.equals(id)) {
                            mine.add(s);
                        }
                    }
                }
                for (CaptureStreaming s : mine) {
                    synchronized (s) {
                        s.appendStaged(upTo, true, -1, "");
                    }
                }
            }
        });
    }
}
