package eventlog.spark;

import java.io.IOException;
import java.nio.file.DirectoryNotEmptyException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.util.TaskCompletionListener;

/**
 * One task attempt's capture of its partition, as {@code connectors/spark/staging.py::PartStager} and
 * {@code capture.Capture} do it: the records go into a staging log of the attempt's own
 * ({@code <log>/.staging/<stream>/<job>/<partition>-<attempt>-<nonce>}, part 0 of a one-part stream), one
 * Messages event per time per at most {@code eventRows} records, then one Progress event that retracts the
 * minimum time (the part is finished); {@link #finish} seals the segment and publishes the staged part as
 * part {@code partition} of the stream by one atomic rename (the first attempt to finish wins);
 * {@link #discard} drops it.
 */
final class PartCapture {
    static final String STAGING_DIR = ".staging";
    /** Records of all times buffered at most before every time's records are written (as PartStager). */
    static final int BUFFER_ROWS = 1 << 18;
    /** Distinct times buffered at once at most: a new one beyond it writes every buffered time first. */
    static final int MAX_OPEN_TIMES = 64;
    /** Slots of the cache of recent int64 times' buffers (a power of two). */
    static final int RECENT = 16;
    /** Emptied time buffers kept for reuse at most (the others' memory is released). */
    static final int KEEP_FREE = 8;
    private static final SecureRandom RANDOM = new SecureRandom();

    private final TapSpec spec;
    private final int partition;
    /** The task attempt capturing the partition. */
    final int attempt;
    private final Path stagingRoot;
    private final Path stagedPart;
    private final BufferAllocator alloc;
    private final List<Field> segmentFields;
    private final Schema recordSchema;
    /** The {@code _time} column of product times (int64 times, like {@code _seq}, are constant frames). */
    private final ListVector timeVector;
    private final PartFiles files;
    private final EventEncoder encoder = new EventEncoder();
    private final int timeWidth;
    private final String timeName;

    private final HashMap<Object, Buffer> pending = new HashMap<>();
    private final ArrayDeque<Buffer> free = new ArrayDeque<>();
    private final List<VectorSchemaRoot> all = new ArrayList<>();
    private Buffer literal;
    /** The buffers of recent int64 times by {@code time & (RECENT - 1)}, found without a map lookup. */
    private final Buffer[] recent = new Buffer[RECENT];
    private final long[] recentTime = new long[RECENT];
    private int buffered;
    long rows;
    private boolean closed;

    /** The records buffered for one time. */
    private final class Buffer {
        final VectorSchemaRoot root;
        final RowWriter writer;
        long[] time;
        String json;
        int rows;

        Buffer() {
            root = VectorSchemaRoot.create(recordSchema, alloc);
            all.add(root);
            writer = new RowWriter(root);
        }

        void at(long[] t) {
            time = t;
            json = timeJson(t, spec.arity);
        }
    }

    /**
     * The capture of {@code partition} by the running task attempt (attempt 0 outside a task), dropped when the
     * task ends without having finished it (a failure, or output not read to the end).
     */
    static PartCapture forTask(TapSpec spec, int partition) throws IOException {
        TaskContext ctx = TaskContext.get();
        PartCapture capture = new PartCapture(spec, partition, ctx == null ? 0 : ctx.attemptNumber());
        if (ctx != null) {
            ctx.addTaskCompletionListener(new TaskCompletionListener() {
                @Override
                public void onTaskCompletion(TaskContext context) {
                    capture.discard();  // nothing once finished
                }
            });
        }
        return capture;
    }

    PartCapture(TapSpec spec, int partition, int attempt) throws IOException {
        this.spec = spec;
        this.partition = partition;
        this.attempt = attempt;
        byte[] nonce = new byte[4];
        RANDOM.nextBytes(nonce);
        this.stagingRoot = stagingTop(spec).resolve(spec.stream).resolve(spec.job)
            .resolve(partition + "-" + attempt + "-" + hex(nonce));
        Path streamDir = stagingRoot.resolve(spec.stream);
        this.stagedPart = streamDir.resolve("part=0");
        try {
            createDirectories(streamDir);
            Files.write(streamDir.resolve("_header.json"), spec.stagedHeader);
        } catch (IOException | RuntimeException e) {
            removeStaging();  // no capture is returned, so no task listener would ever discard it
            throw e;
        }
        Schema base = EventEncoder.readSchema(spec.schemaMessage);
        this.segmentFields = base.getFields();
        int n = segmentFields.size();
        this.recordSchema = new Schema(segmentFields.subList(0, n - 2), base.getCustomMetadata());
        byte[] writer = new byte[8];
        RANDOM.nextBytes(writer);
        Map<String, String> mark = new LinkedHashMap<>();
        mark.put("eventlog.epoch", "1");
        mark.put("eventlog.writer", hex(writer));
        byte[] schemaMessage = EventEncoder.schemaMessage(base, mark);
        this.alloc = ArrowUtils.rootAllocator().newChildAllocator("eventlog-tap-" + partition, 0, Long.MAX_VALUE);
        boolean ok = false;
        try {
            this.timeVector = spec.arity == 0 ? null : (ListVector) segmentFields.get(n - 2).createVector(alloc);
            this.files = new PartFiles(stagedPart, schemaMessage, spec.segmentBytes, spec.fsync);
            if (spec.startSeqs != null) {
                files.startAt(spec.startSeqs[partition]);
            }
            if (spec.timeColumn >= 0) {
                Field f = segmentFields.get(spec.timeColumn);
                timeName = f.getName();
                Field intField = spec.arity == 0 ? f : f.getChildren().get(0);
                timeWidth = ((ArrowType.Int) intField.getType()).getBitWidth();
            } else {
                timeName = null;
                timeWidth = 0;
            }
            ok = true;
        } finally {
            if (!ok) {
                try {
                    release();
                } finally {
                    removeStaging();  // as above: the folder and header written already would outlive the task
                }
            }
        }
    }

    /**
     * {@code Files.createDirectories}, again when a folder above vanished meanwhile: another attempt of the job
     * that finished removes the staging folders it leaves empty, which may be the ones this attempt is
     * creating its own below (once this attempt's folder exists they are not empty, so they stay).
     */
    static void createDirectories(Path dir) throws IOException {
        for (int tries = 0; ; tries++) {
            try {
                Files.createDirectories(dir);
                return;
            } catch (NoSuchFileException e) {
                if (tries >= 100) {
                    throw e;
                }
            }
        }
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder(2 * b.length);
        for (byte x : b) {
            s.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return s.toString();
    }

    /** A time as JSON, the way Python's {@code json.dumps} writes it ({@code 7}, {@code [1, 2]}). */
    static String timeJson(long[] t, int arity) {
        if (arity == 0) {
            return Long.toString(t[0]);
        }
        StringBuilder s = new StringBuilder("[");
        for (int i = 0; i < t.length; i++) {
            if (i > 0) {
                s.append(", ");
            }
            s.append(t[i]);
        }
        return s.append(']').toString();
    }

    // -- times ---------------------------------------------------------------------------------------------

    private long component(long v) {
        if (v < 0) {
            throw new IllegalArgumentException("time column '" + timeName + "': time " + v
                + " is outside 0..2**63-1 (stream " + spec.stream + ", part " + partition + ")");
        }
        return v;
    }

    private long intTime(InternalRow row) {
        int i = spec.timeColumn;
        if (row.isNullAt(i)) {
            throw new IllegalArgumentException("time column '" + timeName + "' has nulls (stream " + spec.stream
                + ", part " + partition + ")");
        }
        switch (timeWidth) {
            case 8: return component(row.getByte(i));
            case 16: return component(row.getShort(i));
            case 32: return component(row.getInt(i));
            default: return component(row.getLong(i));
        }
    }

    private long[] productTime(InternalRow row) {
        int i = spec.timeColumn;
        if (row.isNullAt(i)) {
            throw new IllegalArgumentException("time column '" + timeName + "' has nulls (stream " + spec.stream
                + ", part " + partition + ")");
        }
        ArrayData a = row.getArray(i);
        if (a.numElements() != spec.arity) {
            throw new IllegalArgumentException("time column '" + timeName + "' has arrays whose length is not "
                + spec.arity + " (stream " + spec.stream + ", part " + partition + ")");
        }
        long[] t = new long[spec.arity];
        for (int j = 0; j < t.length; j++) {
            if (a.isNullAt(j)) {
                throw new IllegalArgumentException("time column '" + timeName + "' has null components (stream "
                    + spec.stream + ", part " + partition + ")");
            }
            switch (timeWidth) {
                case 8: t[j] = component(a.getByte(j)); break;
                case 16: t[j] = component(a.getShort(j)); break;
                case 32: t[j] = component(a.getInt(j)); break;
                default: t[j] = component(a.getLong(j));
            }
        }
        return t;
    }

    private static final class Product {
        final long[] t;
        final int hash;

        Product(long[] t) {
            this.t = t;
            this.hash = Arrays.hashCode(t);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Product && Arrays.equals(t, ((Product) o).t);
        }

        @Override
        public int hashCode() {
            return hash;
        }
    }

    private Buffer bufferFor(Object key, long[] t) throws IOException {
        Buffer b = pending.get(key);
        if (b == null) {
            if (t == null) {
                t = new long[] {(Long) key};
            }
            if (pending.size() >= MAX_OPEN_TIMES) {
                flushAll();
            }
            b = free.isEmpty() ? new Buffer() : free.poll();
            b.at(t);
            pending.put(key, b);
        }
        return b;
    }

    // -- capture -------------------------------------------------------------------------------------------

    void add(InternalRow row) throws IOException {
        Buffer b;
        if (spec.timeColumn < 0) {
            if (literal == null) {
                literal = new Buffer();
                literal.at(spec.literal);
            }
            b = literal;
        } else if (spec.arity == 0) {
            long t = intTime(row);
            int slot = (int) t & (RECENT - 1);
            b = recent[slot];
            if (b == null || recentTime[slot] != t) {
                b = bufferFor(t, null);  // the time's array is made only for a new time
                recent[slot] = b;
                recentTime[slot] = t;
            }
        } else {
            long[] t = productTime(row);
            b = bufferFor(new Product(t), t);
        }
        b.writer.write(row);
        b.rows++;
        buffered++;
        rows++;
        if (b.rows >= spec.eventRows || ((b.rows & 1023) == 0 && b.writer.sizeInBytes() >= spec.eventBytes)) {
            flush(b);
        }
        if (buffered >= BUFFER_ROWS) {
            flushAll();
        }
    }

    /** Write every buffered time's records (in time order) and free the buffers. */
    private void flushAll() throws IOException {
        if (literal != null) {
            flush(literal);
        }
        List<Buffer> times = new ArrayList<>(pending.values());
        times.sort((x, y) -> Arrays.compare(x.time, y.time));
        for (Buffer b : times) {
            flush(b);
            if (free.size() < KEEP_FREE) {
                free.add(b);  // reused for the next new time, its vectors' memory with it
            } else {
                all.remove(b.root);
                b.root.close();
            }
        }
        pending.clear();
        Arrays.fill(recent, null);  // the buffers are freed or reused for other times
    }

    /** {@link #timeVector}: {@code n} copies of the product time {@code t}. */
    private void fillTime(long[] t, int n) {
        ListVector v = timeVector;
        v.reset();
        BigIntVector items = (BigIntVector) v.getDataVector();
        int k = t.length;
        for (int i = 0; i < n; i++) {
            v.startNewValue(i);
            for (int j = 0; j < k; j++) {
                items.setSafe(i * k + j, t[j]);
            }
            v.endValue(i, k);
        }
        items.setValueCount(n * k);
        v.setValueCount(n);
    }

    /** The Messages event(s) of the records buffered for {@code b}'s time. */
    private void flush(Buffer b) throws IOException {
        if (b.rows == 0) {
            return;
        }
        b.writer.finish();
        int n = b.root.getRowCount();
        try {
            writeMessages(b, b.root.getFieldVectors(), n);
        } catch (EventEncoder.TooLarge e) {
            if (n < 2) {
                throw e;
            }
            split(b, 0, n);  // rows whose values exceed one event's limits (long nested arrays): halves
        }
        b.writer.reset();
        buffered -= b.rows;
        b.rows = 0;
    }

    private void split(Buffer b, int from, int n) throws IOException {
        for (int start = from, half = n / 2; start < from + n; start += half, half = from + n - start) {
            try (VectorSchemaRoot slice = b.root.slice(start, half)) {
                try {
                    writeMessages(b, slice.getFieldVectors(), half);
                } catch (EventEncoder.TooLarge e) {
                    if (half < 2) {
                        throw e;
                    }
                    split(b, start, half);
                }
            }
        }
    }

    /** One Messages event of {@code records} (n rows) at {@code b}'s time; nothing is written when it fails. */
    private void writeMessages(Buffer b, List<FieldVector> records, int n) throws IOException {
        long seq = files.nextSeq();
        List<FieldVector> vectors = new ArrayList<>(records);
        long[] constants;  // _seq, and an int64 _time: one value each, written as frames built directly
        if (timeVector == null) {
            constants = new long[] {b.time[0], seq};
        } else {
            fillTime(b.time, n);
            vectors.add(timeVector);
            constants = new long[] {seq};
        }
        VectorSchemaRoot event = new VectorSchemaRoot(
            segmentFields.subList(0, segmentFields.size() - constants.length), vectors, n);
        encoder.encode(event, spec.compress, alloc, constants, new String[] {
            "eventlog.seq", Long.toString(seq), "eventlog.kind", "messages", "eventlog.time", b.json,
            "eventlog.ts", Long.toString(System.currentTimeMillis())});
        files.append(encoder.out.buf, encoder.out.len, PartFiles.KIND_MESSAGES);
    }

    private void progress() throws IOException {
        long seq = files.nextSeq();
        String minimum = timeJson(new long[Math.max(spec.arity, 1)], spec.arity);
        try (VectorSchemaRoot empty = VectorSchemaRoot.create(new Schema(segmentFields), alloc)) {
            empty.allocateNew();
            empty.setRowCount(0);
            encoder.encode(empty, false, new String[] {
                "eventlog.seq", Long.toString(seq), "eventlog.kind", "progress",
                "eventlog.updates", spec.startSeqs == null ? "[[" + minimum + ", -1]]"
                    : "[[" + spec.since + ", -1], [" + (spec.literal[0] + 1) + ", 1]]",
                "eventlog.ts", Long.toString(System.currentTimeMillis())});
        }
        files.append(encoder.out.buf, encoder.out.len, PartFiles.KIND_PROGRESS);
    }

    /**
     * Write what is buffered and the Progress that finishes the part, seal it, and publish it as part
     * {@code partition} of the stream. Returns false when another attempt published that part first (this
     * attempt's staging is then dropped).
     */
    boolean finish() throws IOException {
        try {
            seal();
            return publish();
        } finally {
            removeStaging();
        }
    }

    /**
     * Write what is buffered and the Progress that finishes the staged part, seal it and leave it staged (a
     * micro-batch's part, which the driver appends to the stream); returns the staging log's root folder.
     */
    String finishStaged() throws IOException {
        seal();
        if (spec.store != null) {  // the driver reads it from the log's staging area on the store
            try {
                upload(stagingRoot, jobStaging(spec) + "/" + stagingRoot.getFileName());
            } finally {
                removeStaging();
            }
        }
        return stagingRoot.getFileName().toString();
    }

    /** Put every file below the local folder {@code dir} at the same relative key below {@code prefix}. */
    private void upload(Path dir, String prefix) throws IOException {
        List<Path> files = new ArrayList<>();
        try (Stream<Path> all = Files.walk(dir)) {
            all.filter(f -> Files.isRegularFile(f) && !f.getFileName().toString().equals(".lock")).forEach(files::add);
        }
        for (Path f : files) {
            String rel = dir.relativize(f).toString().replace(java.io.File.separatorChar, '/');
            spec.store.put(key(spec, prefix + "/" + rel), f, false);
        }
    }

    /** Write what is buffered and the Progress that finishes the part, and seal its segment; the capture is
     * closed afterwards, whether that worked or not. */
    private void seal() throws IOException {
        try {
            flushAll();
            progress();
            files.close();
        } finally {
            closed = true;
            files.abandon();
            release();
        }
    }

    /** Drop the staged part (a failed attempt, or one whose output was not read to the end). */
    void discard() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            files.abandon();
        } finally {
            release();
            removeStaging();
        }
    }

    boolean isClosed() {
        return closed;
    }

    private void release() {
        encoder.out.recycle();
        for (VectorSchemaRoot r : all) {
            r.close();
        }
        all.clear();
        if (timeVector != null) {
            timeVector.close();
        }
        try {
            alloc.close();
        } catch (IllegalStateException e) {  // a leak report: the capture itself is done
            System.err.println("eventlog JVM tap: " + e.getMessage());
        }
    }

    // -- publishing ------------------------------------------------------------------------------------

    static Path partDir(TapSpec spec, int part) {
        if (spec.startSeqs != null) {  // a micro-batch's part: claimed in the batch's staging folder
            return stagingTop(spec).resolve(spec.stream).resolve(spec.job).resolve("part=" + part);
        }
        return Paths.get(spec.root, spec.stream, "part=" + part);
    }

    /**
     * Where attempts stage their parts: the log's {@code .staging} folder for a local log; for a log on an object
     * store, a folder in the executor's Spark local directory (the staged part is copied to the store when it is
     * published, which needs no staging there).
     */
    static Path stagingTop(TapSpec spec) {
        if (spec.store == null) {
            return Paths.get(spec.root, STAGING_DIR);
        }
        return localDir().resolve("eventlog-staging");
    }

    /** The executor's Spark local directory (the JVM's temporary folder outside a Spark executor). */
    static Path localDir() {
        String local = null;
        try {
            SparkEnv env = SparkEnv.get();
            if (env != null) {
                local = org.apache.spark.util.Utils.getLocalDir(env.conf());
            }
        } catch (RuntimeException | LinkageError e) {
            local = null;  // another Spark's internals: the JVM's temporary folder then
        }
        return Paths.get(local != null ? local : System.getProperty("java.io.tmpdir"));
    }

    /** The object key of {@code rel} (a path below the log's root) on the spec's store. */
    static String key(TapSpec spec, String rel) {
        return spec.root.isEmpty() ? rel : spec.root + "/" + rel;
    }

    /** The key of file {@code name} of part {@code part} on the spec's store. */
    private static String partKey(TapSpec spec, int part, String name) {
        return key(spec, spec.stream + "/part=" + part + "/" + name);
    }

    /** Whether part {@code part} of the stream exists already (an earlier attempt or evaluation published it). */
    static boolean published(TapSpec spec, int part) throws IOException {
        if (spec.store != null && spec.startSeqs != null) {  // a micro-batch's part: claimed by its claim object
            return spec.store.exists(claimKey(spec, part));
        }
        if (spec.store != null) {
            return spec.store.exists(partKey(spec, part, PartFiles.name20(1) + ".arrow"));  // every part starts so
        }
        Path dir = partDir(spec, part);
        if (!Files.isDirectory(dir)) {
            return false;
        }
        try (Stream<Path> names = Files.list(dir)) {
            return names.anyMatch(p -> p.getFileName().toString().endsWith(".arrow"));
        }
    }

    /** The atomic rename of {@code staging.py::_publish_by_rename}: fails when the part exists (not empty). */
    private boolean publish() throws IOException {
        if (spec.store != null) {
            return publishObjects();
        }
        Path dst = partDir(spec, partition);
        try {
            Files.move(stagedPart, dst, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            if (e instanceof DirectoryNotEmptyException || nonEmptyDir(dst)) {
                return false;  // another attempt published this part first
            }
            throw e;
        }
        if (spec.fsync) {
            PartFiles.syncDir(dst.getParent());  // the rename itself survives a crash
        }
        return true;
    }

    /**
     * {@code staging.py::_publish_objects}: put the sealed segments in sequence order, each followed by its index,
     * the first one by an exclusive create, which exactly one of the attempts racing for this part wins.
     */
    private boolean publishObjects() throws IOException {
        if (spec.startSeqs != null) {
            return claimObjects();
        }
        TreeSet<String> segments = new TreeSet<>();
        try (Stream<Path> names = Files.list(stagedPart)) {
            names.map(p -> p.getFileName().toString()).filter(n -> n.matches("[0-9]{20}\\.arrow"))
                .forEach(segments::add);
        }
        if (segments.isEmpty() || !segments.first().equals(PartFiles.name20(1) + ".arrow")) {
            throw new IOException("staged part " + stagedPart + " does not start with its first segment");
        }
        boolean first = true;
        for (String name : segments) {
            String key = partKey(spec, partition, name);
            if (!spec.store.put(key, stagedPart.resolve(name), true)) {
                if (first) {
                    return false;  // another attempt published this part
                }
                throw new IOException("segment " + spec.store.display(key) + " appeared while "
                    + "this attempt published the part (a writer outside Spark?)");
            }
            first = false;
            String index = "_" + name.substring(0, 20) + ".index";
            Path indexFile = stagedPart.resolve(index);
            if (Files.exists(indexFile)) {  // readers read around a missing index; a later writer rebuilds it
                spec.store.put(partKey(spec, partition, index), indexFile, false);
            }
        }
        return true;
    }

    /** The key of the object claiming partition {@code part} of a micro-batch on a store: {@code
     * <root>/.staging/<stream>/<job>/part=<p>}, holding the name of the claiming attempt's folder beside it. */
    static String claimKey(TapSpec spec, int part) {
        return key(spec, jobStaging(spec) + "/part=" + part);
    }

    /** The job's staging folder on a store, relative to the log's root: {@code .staging/<stream>/<job>}. */
    static String jobStaging(TapSpec spec) {
        return STAGING_DIR + "/" + spec.stream + "/" + spec.job;
    }

    /**
     * A micro-batch's part on a store: put the sealed segments (numbered from the part's next sequence id), each
     * followed by its index, below the attempt's own folder {@code <root>/.staging/<stream>/<job>/<p>-<attempt>-
     * <nonce>/}, then claim the partition by an exclusive create of its claim object ({@link #claimKey}) naming
     * that folder: of the attempts that staged the whole partition exactly one claims it, and a claim names a
     * complete upload. A loser removes its upload and returns false. The driver appends the claimed part
     * ({@link CaptureStreaming}).
     */
    private boolean claimObjects() throws IOException {
        TreeSet<String> names = new TreeSet<>();
        try (Stream<Path> all = Files.list(stagedPart)) {
            all.map(p -> p.getFileName().toString()).filter(n -> n.matches("[0-9]{20}\\.arrow|_[0-9]{20}\\.index"))
                .forEach(names::add);
        }
        String first = PartFiles.name20(spec.startSeqs[partition]) + ".arrow";
        if (!names.contains(first)) {
            throw new IOException("staged part " + stagedPart + " of stream " + spec.stream + " part " + partition
                + " does not start with its first segment " + first);
        }
        String folder = stagingRoot.getFileName().toString();
        String prefix = key(spec, jobStaging(spec) + "/" + folder);
        List<String> put = new ArrayList<>();
        boolean claimed = false;
        try {
            for (String name : names) {  // the claim, put last, is what makes them count
                put.add(prefix + "/" + name);
                spec.store.put(prefix + "/" + name, stagedPart.resolve(name), false);
            }
            Path claim = stagingRoot.resolve("claim");
            Files.write(claim, folder.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            claimed = spec.store.put(claimKey(spec, partition), claim, true);
            return claimed;
        } finally {
            if (!claimed) {
                for (String k : put) {
                    try {
                        spec.store.delete(k);
                    } catch (IOException e) {
                        System.err.println("eventlog JVM tap: could not remove " + spec.store.display(k) + ": " + e);
                    }
                }
            }
        }
    }

    private static boolean nonEmptyDir(Path dir) {
        if (!Files.isDirectory(dir)) {
            return false;
        }
        try (Stream<Path> names = Files.list(dir)) {
            return names.findAny().isPresent();
        } catch (IOException e) {
            return false;
        }
    }

    /** Remove this attempt's staging folder, then the staging folders above it that are left empty. */
    private void removeStaging() {
        deleteTree(stagingRoot);
        removeEmptyAbove(spec, stagingRoot);
    }

    /** Remove the staging folders above {@code path} that are empty, up to the log's {@code .staging}. */
    private static void removeEmptyAbove(TapSpec spec, Path path) {
        Path parent = path.getParent();
        Path top = stagingTop(spec);
        while (parent != null && parent.startsWith(top)) {
            try {
                Files.delete(parent);  // only when empty: concurrent attempts keep their folders
            } catch (IOException e) {
                break;
            }
            parent = parent.getParent();
        }
    }

    /**
     * Remove what attempts of the job left in its staging folder for partitions that are published already, as
     * {@code connectors/spark/staging.py::sweep_job}: the folders ({@code <partition>-<attempt>-<nonce>}) of
     * attempts whose executor died before they discarded their staging, and of attempts that lost the race for
     * their partition and are still running (they cannot publish any more: a published part stays; when their
     * writes fail they find the part published and pass their rows on, see {@link PartTap}). Each folder is
     * removed on its own, never the job's folder as a whole: an attempt of a partition not yet published may
     * create its folder at any moment, after this listed the job's folder. The job's folder and the ones above
     * it are removed only when left empty. Each attempt calls this after it published (or lost) and removed its
     * own folder, so the last partition to publish removes what dead attempts left. Returns true if it removed
     * any folder.
     */
    static boolean sweepJob(TapSpec spec) {
        if (spec.store != null) {
            // staging is in the executors' Spark local directories, removed with them; and a part on a store is
            // published by several puts, so another attempt's folder may still be read after its part shows
            return false;
        }
        Path job = stagingTop(spec).resolve(spec.stream).resolve(spec.job);
        List<String> names = new ArrayList<>();
        try (Stream<Path> entries = Files.list(job)) {
            entries.forEach(e -> names.add(e.getFileName().toString()));
        } catch (IOException e) {  // gone already (removed with the last attempt folder in it), or unreadable
            return false;
        }
        Map<Integer, Boolean> done = new HashMap<>();
        boolean removed = false;
        for (String name : names) {
            String head = name.split("-", 2)[0];
            if (head.isEmpty() || head.length() > 9 || !head.chars().allMatch(c -> c >= '0' && c <= '9')) {
                continue;  // not ours: leave it alone
            }
            int part = Integer.parseInt(head);
            Boolean published = done.get(part);
            if (published == null) {
                try {
                    published = published(spec, part);
                } catch (IOException e) {
                    published = false;
                }
                done.put(part, published);
            }
            if (published) {  // an attempt of an unpublished partition may still publish it: its folder stays
                Path folder = job.resolve(name);
                deleteTree(folder);
                removeEmptyAbove(spec, folder);
                removed = true;
            }
        }
        return removed;
    }

    static void deleteTree(Path root) {
        try {
            Files.walkFileTree(root, new SimpleFileVisitor<Path>() {
                @Override
                public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) throws IOException {
                    Files.deleteIfExists(file);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult visitFileFailed(Path file, IOException exc) throws IOException {
                    if (exc instanceof NoSuchFileException) {
                        return FileVisitResult.CONTINUE;  // removed meanwhile by another attempt's sweep
                    }
                    throw exc;
                }

                @Override
                public FileVisitResult postVisitDirectory(Path dir, IOException exc) throws IOException {
                    if (exc != null && !(exc instanceof NoSuchFileException)) {
                        throw exc;
                    }
                    Files.deleteIfExists(dir);
                    return FileVisitResult.CONTINUE;
                }
            });
        } catch (NoSuchFileException ignored) {
            // gone already
        } catch (DirectoryNotEmptyException e) {
            // a losing attempt still writing in the folder a sweep removes: it removes its folder when it ends
        } catch (IOException e) {
            System.err.println("eventlog JVM tap: could not remove staging folder " + root + ": " + e);
        }
    }
}
