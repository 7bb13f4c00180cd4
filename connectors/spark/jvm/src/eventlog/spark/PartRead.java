package eventlog.spark;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.CRC32;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.VectorUnloader;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The first pass over one part of a sealed 2.x Arrow file log (FORMAT.md §3.2-§3.4, §4.1), making the checks
 * {@code connectors/files/reader.py} (with {@code segment.py}, {@code framing.py}, {@code encoding/arrow.py} and
 * {@code arrow_file.py}) and {@code eventlog/parts} make, in their order, so that the same damage gives the same
 * error: each segment's index header, its prefix (magic, the schema message framed, verified and read, its
 * writer epoch and id, epochs never decreasing, the stream's schema), then each event — its index entry (checksum,
 * seq and offset; a damaged <i>last</i> entry, a short or missing index: the Arrow framing), its body's CRC-32, its
 * IPC message checked before anything is allocated for it ({@link IpcChecks}), its metadata (sequence id of its
 * place, kind, write time, time or updates), timely's progress rules ({@code eventlog/parts/rules.py}) — then the
 * segment's end: the end-of-stream marker, a footer listing exactly its events, no index entry past them, segments
 * continuing each other from seq 1.
 *
 * <p>Every segment read here is sealed (the planner refuses open ones), and a sealed name promises a whole file
 * (FORMAT.md §3.4): a sealed segment that does not end with its end-of-stream marker and footer is damage, the
 * newest one too (where the Python reader reads up to the damage and reports a torn tail).
 *
 * <p>The committed view (FORMAT.md §1.1) decides which Messages events are delivered: in sequence order, each
 * once a later Progress passes its time, void ones of an ended incarnation dropped, those held at the end not
 * delivered. Every Messages event is listed in {@link #messages}: {@link PartBatches} decodes each (the Python
 * reader decodes every event it reads) and returns the rows of those delivered.
 */
final class PartRead {
    static final long MAX_PREFIX_BYTES = 64L << 20;
    /** An index larger than this is refused before it is read (16 + 32 bytes an event: 8 Mi events). */
    static final long MAX_INDEX_BYTES = 256L << 20;
    static final long MAX_SEQ = Long.MAX_VALUE;
    private static final Pattern SEALED = Pattern.compile("(\\d{20})\\.arrow");
    private static final Pattern EPOCH = Pattern.compile("0|[1-9][0-9]{0,18}");
    private static final Pattern WRITER = Pattern.compile("[!-~]{1,64}");
    private static final byte[] MAGIC = Footer.LEADING_MAGIC;

    /** A Messages event to decode: its segment, byte range, seq, time (null until its metadata is read). */
    static final class Msg {
        final int segment;
        final long offset;
        final int length;
        final long seq;
        long[] time;
        /** The committed view delivers it. */
        boolean released;

        Msg(int segment, long offset, int length, long seq) {
            this.segment = segment;
            this.offset = offset;
            this.length = length;
            this.seq = seq;
        }
    }

    final ReadSpec spec;
    final int part;
    final Path dir;
    /** Each segment's name for messages: its local path, or {@code s3://bucket/key}. */
    final List<String> paths = new ArrayList<>();
    final List<ByteBuffer> maps = new ArrayList<>();
    /** Every event with rows (a Messages event), in sequence order: the Python reader decodes each. */
    final List<Msg> messages = new ArrayList<>();
    private final List<Field> fields;
    private final long[] emptyShape;

    // timely's rules and the committed view
    private final Map<TimeKey, Long> counts = new HashMap<>();
    private final ArrayDeque<Msg> held = new ArrayDeque<>();
    private long epoch = -1;

    PartRead(ReadSpec spec, int part) throws IOException {
        this.spec = spec;
        this.part = part;
        this.dir = Paths.get(spec.streamDir, "part=" + part);
        Schema schema = EventEncoder.readSchema(spec.schemaMessage);
        this.fields = schema.getFields();
        this.emptyShape = emptyShape(schema);
        counts.put(new TimeKey(new long[Math.max(spec.arity, 1)]), 1L);
    }

    /** {FieldNodes, Buffers} of an empty batch of {@code schema}, as an IPC writer writes it. */
    private static long[] emptyShape(Schema schema) {
        try (BufferAllocator alloc = new RootAllocator();
             VectorSchemaRoot root = VectorSchemaRoot.create(schema, alloc)) {
            root.setRowCount(0);
            try (ArrowRecordBatch batch = new VectorUnloader(root).getRecordBatch()) {
                return new long[] {batch.getNodes().size(), batch.getBuffers().size()};
            }
        }
    }

    private CorruptLogException corrupt(String what, long seq, long offset, String file) {
        return new CorruptLogException("CorruptLogError", what, spec.stream, part, seq, offset, file);
    }

    /** Read the part's events; the Messages events are in {@link #messages}, those delivered marked. */
    PartRead read() throws IOException {
        List<Long> firsts = new ArrayList<>();
        for (String name : names()) {
            Matcher m = SEALED.matcher(name);
            if (m.matches()) {
                firsts.add(Long.parseLong(m.group(1)));
            } else if (name.endsWith(".open") || name.endsWith(".avro") || name.endsWith(".arrows")) {
                throw new IllegalStateException("eventlog JVM reader: stream " + spec.stream + " part " + part
                    + " has " + name + " (an open segment or another encoding), which the JVM reader does"
                    + " not read; read it with engine='python'");
            }
        }
        firsts.sort(null);
        long next = 1;
        for (int s = 0; s < firsts.size(); s++) {
            long first = firsts.get(s);
            String dataName = String.format("%020d.arrow", first);
            if (first != next) {  // named as the Python reader names it: the segment that ends (none before the first)
                String why = s == 0 ? "events before seq " + first + " are not in the log (asked for seq 1)"
                    : "segment ends at seq " + (next - 1) + " but the next segment starts at " + first;
                throw new CorruptLogException("SequenceError", why, spec.stream, part, next, -1,
                    s == 0 ? null : where(String.format("%020d.arrow", firsts.get(s - 1))));
            }
            next = segment(s, first, dataName, String.format("_%020d.index", first));
        }
        return this;
    }

    /** The names in the part's folder (none when it has none). */
    private List<String> names() throws IOException {
        List<String> out = new ArrayList<>();
        if (spec.store != null) {
            out.addAll(spec.store.list(prefix()));
        } else if (Files.isDirectory(dir)) {
            try (Stream<Path> list = Files.list(dir)) {
                list.forEach(p -> out.add(p.getFileName().toString()));
            }
        }
        return out;
    }

    /** The part folder's key prefix on the store. */
    private String prefix() {
        return spec.streamDir + "/part=" + part;
    }

    /** A file of the part folder, named for messages. */
    private String where(String name) {
        return spec.store != null ? spec.store.display(prefix() + "/" + name) : dir.resolve(name).toString();
    }

    /**
     * The whole of segment {@code name}: mapped from the local file, or from a copy of the object in a local
     * temporary file (removed at once; the mapping keeps its pages).
     */
    private ByteBuffer load(String name) throws IOException {
        Path copy = null;
        if (spec.store != null) {
            copy = Files.createTempFile(PartCapture.localDir(), "eventlog-read-", ".arrow");
            if (!spec.store.download(prefix() + "/" + name, copy, Integer.MAX_VALUE - 64)) {
                Files.deleteIfExists(copy);
                throw new CorruptLogException("CorruptLogError", "segment was listed but is gone (the stream was "
                    + "rewritten while it was read?)", spec.stream, part, -1, -1, where(name));
            }
        }
        Path file = copy != null ? copy : dir.resolve(name);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size > Integer.MAX_VALUE - 64) {
                throw new IllegalStateException("eventlog JVM reader: segment " + where(name) + " is over 2 GiB");
            }
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, size).order(ByteOrder.LITTLE_ENDIAN);
        } finally {
            if (copy != null) {
                Files.deleteIfExists(copy);
            }
        }
    }

    /** The index {@code name}'s bytes, or null when there is none (readers read around a missing index). */
    private byte[] index(String name) throws IOException {
        if (spec.store != null) {
            return spec.store.get(prefix() + "/" + name, MAX_INDEX_BYTES);
        }
        Path file = dir.resolve(name);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size > MAX_INDEX_BYTES) {  // refused before anything is allocated for it
                throw new CorruptLogException("LogLimitError", "index of " + size + " bytes is over the reader's "
                    + "limit of " + MAX_INDEX_BYTES, spec.stream, part, -1, -1, where(name));
            }
            ByteBuffer buf = ByteBuffer.allocate((int) size);
            while (buf.hasRemaining() && ch.read(buf) >= 0) {
                // a file that shrank meanwhile ends the read early: the index is short, as a torn tail is
            }
            return buf.position() == buf.capacity() ? buf.array() : Arrays.copyOf(buf.array(), buf.position());
        } catch (NoSuchFileException e) {
            return null;
        }
    }

    private static ByteBuffer slice(ByteBuffer b, long at, long n) {
        return b.duplicate().position((int) at).limit((int) (at + n)).slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    // -- framing (connectors/files/framing.py) --------------------------------------------------------------

    /** Bytes that cannot be (the start of) a prefix or an event: {@code framing.Malformed}. */
    private static final class Malformed extends Exception {
        private static final long serialVersionUID = 1L;
        final long offset;

        Malformed(String reason, long offset) {
            super(reason, null, false, false);
            this.offset = offset;
        }
    }

    /** Where the framing stops: the end of the data, bytes not whole yet, or the end-of-stream marker. */
    private static final long INCOMPLETE = -2;
    private static final long END = -1;

    /**
     * {@code ArrowFraming._message}: the length of the whole IPC message at {@code offset} of the
     * {@code size}-byte segment ({@link #INCOMPLETE} when its bytes are not all there, {@link #END} at the
     * end-of-stream marker); {@code want}: the message type that belongs there.
     */
    private static long frame(ByteBuffer b, long size, long offset, int want) throws Malformed {
        long have = Math.min(8, size - offset);
        if (have < 8) {
            boolean prefix = true;
            for (int k = 0; k < have; k++) {
                prefix &= b.get((int) (offset + k)) == (byte) 0xff || k >= 4;
            }
            boolean cont = have > 4;
            for (int k = 0; k < Math.min(have, 4); k++) {
                cont &= b.get((int) (offset + k)) == (byte) 0xff;
            }
            boolean partialCont = true;
            for (int k = 0; k < have; k++) {
                partialCont &= b.get((int) (offset + k)) == (byte) 0xff;
            }
            if (!partialCont && !cont) {
                throw new Malformed("bytes that are not an Arrow IPC message", offset);
            }
            return INCOMPLETE;
        }
        if (b.getInt((int) offset) != -1) {
            throw new Malformed("bytes that are not an Arrow IPC message (no continuation marker)", offset);
        }
        long metaLen = b.getInt((int) offset + 4);
        if (metaLen == 0) {
            return END;
        }
        long limit = want == IpcChecks.SCHEMA ? MAX_PREFIX_BYTES : IpcChecks.MAX_EVENT_METADATA_BYTES;
        if (metaLen < 8 || metaLen > limit) {
            throw new Malformed("Arrow IPC message declares " + metaLen + " bytes of metadata", offset);
        }
        if (offset + 8 + metaLen > size) {
            return INCOMPLETE;
        }
        long[] header = messageHeader(b, offset + 8, metaLen, offset);
        if (header[0] != want) {
            throw new Malformed("Arrow IPC message of type " + header[0] + " where a "
                + (want == IpcChecks.SCHEMA ? "schema" : "record batch") + " belongs", offset);
        }
        long body = header[1];
        if (body < 0 || body > (want == IpcChecks.SCHEMA ? 0 : IpcChecks.MAX_EVENT_BYTES)) {
            throw new Malformed("Arrow IPC message declares a body of " + body + " bytes", offset);
        }
        if (offset + 8 + metaLen + body > size) {
            return INCOMPLETE;
        }
        return 8 + metaLen + body;
    }

    /** {@code framing._message_header}: {header_type, bodyLength} of the Message flatbuffer {@code [at, at + n)}. */
    private static long[] messageHeader(ByteBuffer b, long at, long n, long offset) throws Malformed {
        long table = u(b, at, n, 0, 4, offset) & 0xffffffffL;
        long vtable = table - (int) u(b, at, n, table, 4, offset);
        long vtSize = u(b, at, n, vtable, 2, offset) & 0xffff;
        if (vtSize < 4 || vtSize % 2 != 0) {
            throw new Malformed("IPC message metadata has a malformed vtable", offset);
        }
        long[] out = new long[2];
        for (int k = 0; k < 2; k++) {
            int i = k == 0 ? 1 : 3;
            long slot = 4 + 2L * i;
            long rel = slot + 2 > vtSize ? 0 : u(b, at, n, vtable + slot, 2, offset) & 0xffff;
            if (rel != 0) {
                out[k] = k == 0 ? u(b, at, n, table + rel, 1, offset) & 0xff : u(b, at, n, table + rel, 8, offset);
            }
        }
        return out;
    }

    private static long u(ByteBuffer b, long at, long n, long pos, int size, long offset) throws Malformed {
        if (pos < 0 || pos > n - size) {
            throw new Malformed("IPC message metadata points outside itself", offset);
        }
        int p = (int) (at + pos);
        switch (size) {
            case 1:
                return b.get(p);
            case 2:
                return b.getShort(p);
            case 4:
                return b.getInt(p);
            default:
                return b.getLong(p);
        }
    }

    // -- one segment ------------------------------------------------------------------------------------------

    /** One sealed segment; returns the seq after its last event. */
    private long segment(int s, long first, String dataName, String indexName) throws IOException {
        String data = where(dataName);
        String indexPath = where(indexName);
        ByteBuffer b = load(dataName);
        long size = b.capacity();
        paths.add(data);
        maps.add(b);

        // the index header (the Python reader opens the index and checks its header first)
        byte[] idx = index(indexName);
        long entries = 0;
        ByteBuffer ib = null;
        if (idx != null && idx.length >= 16) {
            ib = ByteBuffer.wrap(idx).order(ByteOrder.LITTLE_ENDIAN);
            if (ib.get(0) != 'E' || ib.get(1) != 'L' || ib.get(2) != 'I' || ib.get(3) != 'X') {
                throw corrupt("damaged index header: bad index magic", -1, 0, indexPath);
            }
            int major = ib.getShort(4) & 0xffff;
            if (major != 1) {
                throw new CorruptLogException("UnsupportedVersionError", "index has format version " + major + "."
                    + (ib.getShort(6) & 0xffff) + "; this eventlog reads 1.x", spec.stream, part, -1, 0, indexPath);
            }
            if (ib.getLong(8) != first) {
                throw corrupt("index header says first seq " + ib.getLong(8) + ", its name " + first, -1, 8,
                    indexPath);
            }
            entries = (idx.length - 16) / 32;
        }

        // the prefix: magic and schema message, framed; where the index places the first event
        long prefix;
        try {
            for (int k = 0; k < Math.min(8, size); k++) {
                if (b.get(k) != MAGIC[k]) {
                    throw new Malformed("segment does not start with the Arrow IPC file magic", 0);
                }
            }
            long n = size < 8 ? INCOMPLETE : frame(b, size, 8, IpcChecks.SCHEMA);
            if (n == END) {
                throw new Malformed("segment starts with an end-of-stream marker, not a schema", 8);
            }
            if (n == INCOMPLETE) {
                throw corrupt("finished segment ends inside its prefix", -1, 0, data);
            }
            prefix = 8 + n;
        } catch (Malformed m) {
            throw corrupt("damaged segment prefix: " + m.getMessage(), -1, m.offset, data);
        }
        long[] e0 = entries > 0 ? entry(ib, 0) : null;
        if (e0 != null && e0[1] != prefix) {
            throw corrupt("damaged segment prefix: the segment prefix does not end where the index places the first "
                + "event (byte " + e0[1] + ")", -1, 0, data);
        }
        long segEpoch = schema(b, prefix, data);
        if (!segEpochs.isEmpty() && segEpoch < segEpochs.get(s - 1)) {
            throw corrupt("segment has writer epoch " + segEpoch + ", lower than epoch " + segEpochs.get(s - 1)
                + " of the segment before it: two writer histories are interleaved", -1, 0, data);
        }
        segEpochs.add(segEpoch);

        // the events: by the index where it has a whole entry, by the framing after it
        List<long[]> places = new ArrayList<>();
        CRC32 crc = new CRC32();
        long seq = first;
        long pos = prefix;
        long i = 0;
        String problem = null;
        boolean eos = false;
        while (true) {
            long[] e = null;
            if (i < entries) {
                e = entry(ib, i);
                if (e == null && i < entries - 1) {
                    throw corrupt("index entry fails its checksum", seq, 16 + 32 * i, indexPath);
                }
            }
            long length;
            if (e != null) {
                if (e[0] != seq || e[1] != pos) {
                    throw corrupt("index entry disagrees with the segment: it places seq " + e[0] + " at byte " + e[1]
                        + ", the segment has seq " + seq + " at byte " + pos, seq, 16 + 32 * i, indexPath);
                }
                if (pos + e[2] > size) {
                    problem = "seq " + seq + " ends at byte " + (pos + e[2]) + " but " + data + " has " + size + " bytes";
                    break;
                }
                length = e[2];
            } else {
                try {
                    length = frame(b, size, pos, IpcChecks.RECORD_BATCH);
                } catch (Malformed m) {
                    throw corrupt("damaged event bytes in a finished segment: " + m.getMessage(), seq, m.offset, data);
                }
                if (length == END) {
                    eos = true;
                    break;
                }
                if (length == INCOMPLETE) {
                    problem = size > pos ? "partial event at byte " + pos + " of " + data + " (" + (size - pos)
                        + " bytes)" : null;
                    break;
                }
            }
            if (e != null) {
                crc.reset();
                crc.update(slice(b, pos, length));
                if ((int) crc.getValue() != (int) e[3]) {
                    throw corrupt("event fails its checksum", seq, pos, data);
                }
            }
            event(s, b, pos, (int) length, seq, data);
            places.add(new long[] {pos, length});
            pos += length;
            seq++;
            i++;
        }

        // the segment's end (reader.py::_at_stop, for a sealed segment)
        String beyond = indexBeyond(idx, first, seq, indexPath);
        if (eos) {
            footer(b, size, pos, prefix, places, data);
        } else if (problem == null) {
            throw corrupt("sealed segment does not end with its end-of-stream marker and footer after its last event",
                -1, pos, data);
        }
        if (beyond != null && !beyond.contains("partial") && eos) {
            throw corrupt("index has more than the segment " + data + ": " + beyond, seq, 16 + 32 * (seq - first),
                indexPath);
        }
        if (!eos) {
            throw corrupt("finished segment does not end with a whole event: " + problem, seq, pos, data);
        }
        return seq;
    }

    /** Index entry {@code i} as {seq, offset, length, crc, kind}, or null when it fails its checksum. */
    private static long[] entry(ByteBuffer ib, long i) {
        int at = (int) (16 + 32 * i);
        CRC32 c = new CRC32();
        c.update(ib.array(), at, 28);
        if ((int) c.getValue() != ib.getInt(at + 28)) {
            return null;
        }
        return new long[] {ib.getLong(at), ib.getLong(at + 8), ib.getInt(at + 16) & 0xffffffffL,
            ib.getInt(at + 20) & 0xffffffffL, ib.get(at + 24)};
    }

    /** {@code SegmentFiles.index_beyond}: what the index holds past the entry of {@code seq - 1}, or null. */
    private static String indexBeyond(byte[] idx, long first, long seq, String indexPath) {
        if (idx == null) {
            return null;
        }
        if (idx.length < 16) {
            return idx.length > 0 ? "partial index header (" + idx.length + " bytes) in " + indexPath : null;
        }
        long at = 16 + 32 * (seq - first);
        long extra = idx.length - at;
        if (extra <= 0) {
            return null;
        }
        long whole = extra / 32;
        if (whole > 0) {
            return whole + " index " + (whole == 1 ? "entry" : "entries") + " past the last whole event (byte " + at
                + " of " + indexPath + ")";
        }
        return "partial index entry at byte " + at + " of " + indexPath;
    }

    /**
     * The segment's schema message (the prefix {@code [8, prefix)}): verified and read as pyarrow reads it, its
     * writer mark checked (FORMAT.md §3.1), its fields the stream's with {@code _time} and {@code _seq}. Returns
     * the segment's writer epoch.
     */
    private long schema(ByteBuffer b, long prefix, String data) {
        long metaLen = b.getInt(12);
        if (!IpcChecks.verifyMessage(b, 16, metaLen)) {
            throw corrupt("segment does not start with an Arrow IPC schema: OSError: Invalid flatbuffers message.",
                -1, 0, data);
        }
        Message message = Message.getRootAsMessage(slice(b, 16, metaLen));
        if (!keyValuesWhole(message)) {
            throw corrupt("segment does not start with an Arrow IPC schema: OSError: Unexpected null field "
                + "custom_metadata.key in flatbuffer-encoded metadata", -1, 0, data);
        }
        // the fields as Arrow Java reads them; the custom metadata as bytes (pyarrow keeps them so: a key that is no
        // UTF-8 is just another key, where Arrow Java's reader of the schema would fail)
        org.apache.arrow.flatbuf.Schema fb = (org.apache.arrow.flatbuf.Schema) message.header(
            new org.apache.arrow.flatbuf.Schema());
        List<Field> segmentFields = new ArrayList<>();
        Map<String, String> meta = new HashMap<>();
        if (fb.endianness() != org.apache.arrow.flatbuf.Endianness.Little) {  // pyarrow's schema then differs
            throw corrupt("segment schema does not match the stream header (with _time, _seq): big-endian", -1, 0,
                data);
        }
        try {
            for (int k = 0; k < fb.fieldsLength(); k++) {
                segmentFields.add(Field.convertField(fb.fields(k)));
            }
            for (int k = 0; k < fb.customMetadataLength(); k++) {
                org.apache.arrow.flatbuf.KeyValue kv = fb.customMetadata(k);
                meta.put(bytes(kv.keyAsByteBuffer()), bytes(kv.valueAsByteBuffer()));
            }
        } catch (RuntimeException e) {
            throw corrupt("segment does not start with an Arrow IPC schema: " + e, -1, 0, data);
        }
        long segEpoch = 0;
        if (meta.containsKey("eventlog.epoch")) {
            String v = meta.get("eventlog.epoch");
            if (v == null || !EPOCH.matcher(v).matches() || new BigInteger(v).compareTo(BigInteger.valueOf(MAX_SEQ)) > 0) {
                throw corrupt("segment metadata has a malformed eventlog.epoch", -1, 0, data);
            }
            segEpoch = Long.parseLong(v);
        }
        if (meta.containsKey("eventlog.writer")) {
            String v = meta.get("eventlog.writer");
            if (v == null || !WRITER.matcher(v).matches()) {
                throw corrupt("segment metadata has a malformed eventlog.writer", -1, 0, data);
            }
        }
        if (!sameFields(segmentFields, fields)) {
            throw corrupt("segment schema does not match the stream header (with _time, _seq): " + segmentFields,
                -1, 0, data);
        }
        return segEpoch;
    }

    /** Every key/value pair of the schema's and its fields' custom metadata has both (pyarrow refuses others). */
    private static boolean keyValuesWhole(Message m) {
        org.apache.arrow.flatbuf.Schema schema = (org.apache.arrow.flatbuf.Schema) m.header(
            new org.apache.arrow.flatbuf.Schema());
        return schema == null || keyValuesWhole(schema.customMetadataLength(), schema::customMetadata)
            && fieldsWhole(schema.fieldsLength(), schema::fields);
    }

    private static boolean fieldsWhole(int n, IntFunction<org.apache.arrow.flatbuf.Field> field) {
        for (int k = 0; k < n; k++) {
            org.apache.arrow.flatbuf.Field f = field.apply(k);
            if (f != null && !(keyValuesWhole(f.customMetadataLength(), f::customMetadata)
                && fieldsWhole(f.childrenLength(), f::children))) {
                return false;
            }
        }
        return true;
    }

    private static boolean keyValuesWhole(int n, IntFunction<org.apache.arrow.flatbuf.KeyValue> pair) {
        for (int k = 0; k < n; k++) {
            org.apache.arrow.flatbuf.KeyValue kv = pair.apply(k);
            if (kv == null || kv.keyAsByteBuffer() == null || kv.valueAsByteBuffer() == null) {
                return false;
            }
        }
        return true;
    }

    /** Fields equal but for their metadata (pyarrow's {@code Schema.equals(check_metadata=False)}). */
    private static boolean sameFields(List<Field> a, List<Field> b) {
        if (a.size() != b.size()) {
            return false;
        }
        for (int i = 0; i < a.size(); i++) {
            Field x = a.get(i);
            Field y = b.get(i);
            if (!x.getName().equals(y.getName()) || x.isNullable() != y.isNullable()
                || !x.getType().equals(y.getType()) || !java.util.Objects.equals(x.getDictionary(), y.getDictionary())
                || !sameFields(x.getChildren(), y.getChildren())) {
                return false;
            }
        }
        return true;
    }

    /**
     * The suffix after the end-of-stream marker at {@code eos}: a whole footer listing exactly the segment's events,
     * byte for byte the one its schema message (the prefix {@code [8, prefix)}) and events make (every writer
     * writes exactly that suffix: {@link Footer#build}; third-party readers believe the footer).
     */
    private void footer(ByteBuffer b, long size, long eos, long prefix, List<long[]> places, String data) {
        long start = eos + 8;
        long trailer = -1;  // ipc_file.py::trailer_length
        if (size >= 10) {
            boolean magic = true;
            for (int k = 0; k < 6; k++) {
                magic &= b.get((int) size - 6 + k) == Footer.FILE_MAGIC[k];
            }
            long n = b.getInt((int) size - 10);
            if (magic && n > 0 && n <= size - 10) {
                trailer = n + 10;
            }
        }
        if (trailer < 0 || size - trailer != start) {
            throw corrupt("sealed segment does not end with a whole footer after its end-of-stream marker", -1, eos,
                data);
        }
        List<long[]> blocks;
        try {
            blocks = IpcChecks.footerBlocks(b, start, trailer - 10);
        } catch (IpcChecks.Bad e) {
            throw corrupt("damaged footer: " + e.getMessage(), -1, start, data);
        }
        boolean same = blocks.size() == places.size();
        for (int k = 0; same && k < blocks.size(); k++) {
            long[] blk = blocks.get(k);
            same = blk[0] == places.get(k)[0] && blk[1] + blk[2] == places.get(k)[1];
        }
        if (!same) {
            throw corrupt("the footer lists " + blocks.size() + " record batches that are not the segment's "
                + places.size() + " events (offsets and lengths)", -1, start, data);
        }
        List<long[]> own = new ArrayList<>();
        for (long[] p : places) {
            long meta = 8 + b.getInt((int) p[0] + 4);
            own.add(new long[] {p[0], meta, p[1] - meta});
        }
        byte[] schemaMessage = new byte[(int) (prefix - 8)];
        b.duplicate().position(8).get(schemaMessage);
        byte[] want = Footer.build(schemaMessage, own);
        if (want.length != size - eos || !slice(b, eos, want.length).equals(ByteBuffer.wrap(want))) {
            throw corrupt("the footer is not the one the segment's schema and events make (its schema, version or "
                + "blocks say something else than the segment: third-party readers would believe it)", -1, start,
                data);
        }
    }

    // -- one event: its message and metadata, timely's rules, the committed view -------------------------

    private void event(int s, ByteBuffer b, long pos, int length, long seq, String data) {
        IpcChecks.Batch batch;
        try {
            batch = IpcChecks.recordBatch(b, pos, length);
        } catch (IpcChecks.Bad e) {
            throw new CorruptLogException(e.kind, "undecodable arrow event: " + e.getMessage(), spec.stream, part, seq,
                pos, data);
        }
        int metaLen = b.getInt((int) pos + 4);
        long metaAt = pos + 8;
        List<String[]> pairs = null;
        Msg msg = null;
        if (batch.rows == 0) {
            IpcChecks.Empty walk = IpcChecks.withoutRows(b, pos, length);
            if (walk != null && walk.nodes == emptyShape[0] && walk.buffers == emptyShape[1] && unique(walk.pairs)) {
                pairs = walk.pairs;  // read without pyarrow
            }
        }
        if (pairs == null) {  // pyarrow opens the message: verified, then read
            if (!IpcChecks.verifyMessage(b, metaAt, metaLen)) {
                throw corrupt("undecodable arrow event: OSError: Invalid flatbuffers message.", seq, pos, data);
            }
            try {
                pairs = metadata(b, metaAt, metaLen);
            } catch (IllegalArgumentException e) {
                throw corrupt("undecodable arrow event: OSError: " + e.getMessage(), seq, pos, data);
            }
            if (batch.rows == 0) {
                long[] got = shape(b, metaAt);
                if (got[0] < emptyShape[0] || got[1] < emptyShape[1]) {
                    throw corrupt("undecodable arrow event: the empty batch has " + got[0] + " field nodes and " + got[1]
                        + " buffers, its schema needs " + emptyShape[0] + " and " + emptyShape[1], seq, pos, data);
                }
            }
        }
        if (batch.rows > 0) {
            msg = new Msg(s, pos, length, seq);  // decoded (by pyarrow) before its metadata is looked at
            messages.add(msg);
        }
        String seqText = first(pairs, "eventlog.seq");
        String kindText = first(pairs, "eventlog.kind");
        String tsText = first(pairs, "eventlog.ts");
        if (seqText == null) {
            throw corrupt("undecodable arrow event: KeyError: b'eventlog.seq'", seq, pos, data);
        }
        if (!digits(seqText) || seqText.length() > 20) {
            throw corrupt("undecodable arrow event: ValueError: sequence id " + seqText + " is not a decimal number",
                seq, pos, data);
        }
        BigInteger carried = new BigInteger(seqText);
        if (carried.signum() <= 0 || carried.compareTo(BigInteger.valueOf(MAX_SEQ)) > 0) {
            throw corrupt("undecodable arrow event: ValueError: sequence id " + seqText + " is outside 1..2**63-1", seq,
                pos, data);
        }
        if (kindText == null) {
            throw corrupt("undecodable arrow event: KeyError: b'eventlog.kind'", seq, pos, data);
        }
        if (tsText != null && (!digits(tsText) || tsText.length() > 18)) {
            throw corrupt("undecodable arrow event: ValueError: write time " + tsText + " is not a decimal number of "
                + "milliseconds", seq, pos, data);
        }
        boolean messagesKind = "messages".equals(kindText);
        long[] time = null;
        List<long[]> times = null;
        List<Long> deltas = null;
        try {
            if (messagesKind) {
                if (batch.rows == 0) {
                    throw new IllegalArgumentException("messages event without records");
                }
                String timeText = first(pairs, "eventlog.time");
                if (timeText == null) {
                    throw new IllegalArgumentException("KeyError: b'eventlog.time'");
                }
                time = time(Json.parse(timeText));
            } else if ("progress".equals(kindText)) {
                if (batch.rows != 0) {
                    throw new IllegalArgumentException("progress event with " + batch.rows + " rows");
                }
                String updatesText = first(pairs, "eventlog.updates");
                if (updatesText == null) {
                    throw new IllegalArgumentException("KeyError: b'eventlog.updates'");
                }
                Object u = Json.parse(updatesText);
                if (!(u instanceof List)) {
                    throw new IllegalArgumentException("progress updates are not a JSON array");
                }
                if (((List<?>) u).size() > IpcChecks.MAX_EVENT_UPDATES) {
                    throw new CorruptLogException("LogLimitError", "updates in one event is " + ((List<?>) u).size()
                        + ", over the format's limit of " + IpcChecks.MAX_EVENT_UPDATES, spec.stream, part, seq, pos,
                        data);
                }
                times = new ArrayList<>();
                deltas = new ArrayList<>();
                for (Object pair : (List<?>) u) {
                    if (!(pair instanceof List) || ((List<?>) pair).size() != 2) {
                        throw new IllegalArgumentException("progress update " + pair + " is not a [time, delta] pair");
                    }
                    Object d = ((List<?>) pair).get(1);
                    if (!(d instanceof Long)) {
                        throw new IllegalArgumentException("progress delta " + d + " is not an int64");
                    }
                    times.add(time(((List<?>) pair).get(0)));
                    deltas.add((Long) d);
                }
            } else {
                throw new IllegalArgumentException("unknown event kind " + kindText);
            }
        } catch (IllegalArgumentException e) {
            throw corrupt("undecodable arrow event: " + e.getMessage(), seq, pos, data);
        }
        if (carried.longValue() != seq) {
            throw corrupt("event carries seq " + seqText + ", its place in the segment is seq " + seq, seq, pos, data);
        }
        if (msg != null) {
            msg.time = time;
        }
        // the committed view (eventlog/parts/committed.py), timely's rules checked on every event
        if (epoch >= 0 && segEpochOf(s) > epoch && !held.isEmpty()) {
            for (Msg h : held) {  // the incarnation ended: its uncommitted messages are void
                if (committed(h.time)) {
                    h.released = true;
                }
            }
            held.clear();
        }
        epoch = Math.max(epoch, segEpochOf(s));
        if (messagesKind) {
            if (counts.isEmpty()) {
                throw progressError("messages at time " + text(time) + " after the part finished", seq, pos, data);
            }
            if (committed(time)) {
                throw progressError("messages at time " + text(time) + " behind the part's frontier", seq, pos, data);
            }
            held.add(msg);
        } else {
            progress(times, deltas, seq, pos, data);
            while (!held.isEmpty() && committed(held.peekFirst().time)) {
                held.pollFirst().released = true;
            }
        }
    }

    /** Each segment's writer epoch. */
    private final List<Long> segEpochs = new ArrayList<>();

    private long segEpochOf(int s) {
        return segEpochs.get(s);
    }

    /** Timely's rules for a Progress event ({@code PartProgress.progress_problems}), then its updates applied. */
    private void progress(List<long[]> times, List<Long> deltas, long seq, long pos, String data) {
        if (counts.isEmpty()) {
            throw progressError("progress after the part finished (its frontier is empty)", seq, pos, data);
        }
        for (int k = 0; k < times.size(); k++) {
            if (deltas.get(k) == 0 || (k > 0 && Arrays.compare(times.get(k - 1), times.get(k)) >= 0)) {
                throw progressError("progress updates are not sorted by time, unique and non-zero", seq, pos, data);
            }
        }
        for (int k = 0; k < times.size(); k++) {
            if (deltas.get(k) > 0 && committed(times.get(k))) {
                throw progressError("progress adds a capability at time " + text(times.get(k)) + " behind the part's "
                    + "frontier: the frontier would move backwards", seq, pos, data);
            }
        }
        Map<TimeKey, Long> after = new HashMap<>(counts);
        for (int k = 0; k < times.size(); k++) {
            TimeKey key = new TimeKey(times.get(k));
            long c;
            try {
                c = Math.addExact(after.getOrDefault(key, 0L), deltas.get(k));
            } catch (ArithmeticException e) {
                c = deltas.get(k) < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
            }
            if (c == 0) {
                after.remove(key);
            } else {
                after.put(key, c);
            }
        }
        for (Map.Entry<TimeKey, Long> c : after.entrySet()) {
            if (c.getValue() < 0) {
                throw progressError("negative capability count: the count of time " + c.getKey() + " would become "
                    + c.getValue(), seq, pos, data);
            }
        }
        counts.clear();
        counts.putAll(after);
    }

    private CorruptLogException progressError(String what, long seq, long pos, String data) {
        return new CorruptLogException("ProgressError", what, spec.stream, part, seq, pos, data);
    }

    private static String text(long[] t) {
        return t.length == 1 ? Long.toString(t[0]) : Arrays.toString(t);
    }

    private static boolean digits(String s) {
        if (s.isEmpty()) {
            return false;
        }
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            if (c < '0' || c > '9') {
                return false;
            }
        }
        return true;
    }

    private static boolean unique(List<String[]> pairs) {
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (String[] p : pairs) {
            if (!seen.add(p[0])) {
                return false;
            }
        }
        return true;
    }

    /** The value of the first pair with {@code key} (pyarrow's {@code KeyValueMetadata[key]}), null when none. */
    private static String first(List<String[]> pairs, String key) {
        for (String[] p : pairs) {
            if (p[0].equals(key)) {
                return p[1];
            }
        }
        return null;
    }

    /** The custom metadata of a verified message, as byte strings (ISO-8859-1: one char a byte). */
    private static List<String[]> metadata(ByteBuffer b, long at, long n) {
        Message m = Message.getRootAsMessage(slice(b, at, n));
        List<String[]> out = new ArrayList<>();
        for (int k = 0; k < m.customMetadataLength(); k++) {
            org.apache.arrow.flatbuf.KeyValue kv = m.customMetadata(k);
            if (kv.keyAsByteBuffer() == null || kv.valueAsByteBuffer() == null) {
                throw new IllegalArgumentException("custom metadata without its key or value");
            }
            out.add(new String[] {bytes(kv.keyAsByteBuffer()), bytes(kv.valueAsByteBuffer())});
        }
        return out;
    }

    private static String bytes(ByteBuffer v) {
        byte[] out = new byte[v.remaining()];
        v.duplicate().get(out);
        return new String(out, StandardCharsets.ISO_8859_1);
    }

    /** {FieldNodes, Buffers} a verified record-batch message declares. */
    private static long[] shape(ByteBuffer b, long at) {
        Message m = Message.getRootAsMessage(slice(b, at, b.getInt((int) at - 4)));
        org.apache.arrow.flatbuf.RecordBatch rb = (org.apache.arrow.flatbuf.RecordBatch) m.header(
            new org.apache.arrow.flatbuf.RecordBatch());
        return rb == null ? new long[] {0, 0} : new long[] {rb.nodesLength(), rb.buffersLength()};
    }

    /** True when no time the part holds a capability for is {@code <= t}. */
    private boolean committed(long[] t) {
        for (TimeKey k : counts.keySet()) {
            if (lessEqual(k.t, t)) {
                return false;
            }
        }
        return true;
    }

    static boolean lessEqual(long[] a, long[] b) {
        for (int i = 0; i < a.length; i++) {
            if (a[i] > b[i]) {
                return false;
            }
        }
        return true;
    }

    /** A JSON time of this stream's type (arity 0: an integer, else a list of arity integers), >= 0. */
    long[] time(Object v) {
        long[] t;
        if (spec.arity == 0) {
            if (!(v instanceof Long)) {
                throw new IllegalArgumentException("time " + v + " is not an int (stream time type int64)");
            }
            t = new long[] {(Long) v};
        } else {
            if (!(v instanceof List) || ((List<?>) v).size() != spec.arity) {
                throw new IllegalArgumentException("time " + v + " is not a tuple of " + spec.arity + " ints");
            }
            List<?> l = (List<?>) v;
            t = new long[spec.arity];
            for (int i = 0; i < t.length; i++) {
                if (!(l.get(i) instanceof Long)) {
                    throw new IllegalArgumentException("time " + v + " is not a tuple of ints");
                }
                t[i] = (Long) l.get(i);
            }
        }
        for (long c : t) {
            if (c < 0) {
                throw new IllegalArgumentException("time " + v + " is outside 0..2**63-1");
            }
        }
        return t;
    }

    static final class TimeKey {
        final long[] t;
        private final int hash;

        TimeKey(long[] t) {
            this.t = t;
            this.hash = Arrays.hashCode(t);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof TimeKey && Arrays.equals(t, ((TimeKey) o).t);
        }

        @Override
        public int hashCode() {
            return hash;
        }

        @Override
        public String toString() {
            return text(t);
        }
    }

    /**
     * A JSON reader of times and updates as Python's {@code json.loads} reads them: numbers are integers
     * (a fraction or exponent is refused, as {@code arrow.py::_json} refuses floats), without leading zeros;
     * whitespace is JSON's; anything else (strings, objects, literals) is no time and is refused.
     */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static Object parse(String text) {
            Json j = new Json(text);
            Object v = j.value(0);
            j.ws();
            if (j.i != text.length()) {
                throw new IllegalArgumentException("trailing characters in " + text);
            }
            return v;
        }

        private void ws() {
            while (i < s.length() && (s.charAt(i) == ' ' || s.charAt(i) == '\t' || s.charAt(i) == '\n'
                || s.charAt(i) == '\r')) {
                i++;
            }
        }

        private Object value(int depth) {
            if (depth > 64) {
                throw new IllegalArgumentException("nesting too deep");
            }
            ws();
            if (i >= s.length()) {
                throw new IllegalArgumentException("unexpected end of " + s);
            }
            char c = s.charAt(i);
            if (c == '[') {
                i++;
                List<Object> out = new ArrayList<>();
                ws();
                if (i < s.length() && s.charAt(i) == ']') {
                    i++;
                    return out;
                }
                while (true) {
                    out.add(value(depth + 1));
                    ws();
                    if (i >= s.length()) {
                        throw new IllegalArgumentException("unexpected end of " + s);
                    }
                    char d = s.charAt(i++);
                    if (d == ']') {
                        return out;
                    }
                    if (d != ',') {
                        throw new IllegalArgumentException("unexpected " + d + " in " + s);
                    }
                }
            }
            int start = i;
            if (c == '-') {
                i++;
            }
            int digitsAt = i;
            while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
                i++;
            }
            if (i == digitsAt || (s.charAt(digitsAt) == '0' && i > digitsAt + 1)) {
                throw new IllegalArgumentException("not an integer at " + start + " of " + s);
            }
            if (i < s.length() && (s.charAt(i) == '.' || s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
                throw new IllegalArgumentException(s + " is not an integer");
            }
            return Long.parseLong(s.substring(start, i));
        }
    }
}
