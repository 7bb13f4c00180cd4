package eventlog.spark;

import java.io.IOException;
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
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.CRC32;
import org.apache.arrow.flatbuf.Block;
import org.apache.arrow.flatbuf.KeyValue;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The first pass over one part of a sealed 2.x Arrow file log (FORMAT.md §3.2-§3.4, §4.1), as
 * {@code connectors/files/reader.py} and {@code replay/committed.py} read it: every segment's prefix, schema
 * and epoch (never decreasing), every index entry's checksum and chain (a damaged <i>last</i> entry, a short
 * or missing index: the events are found by the Arrow framing), every body's CRC-32, every event's metadata
 * (sequence id of its place, kind, time or updates), the end-of-stream marker and a footer listing exactly
 * the events, segments continuing each other from seq 1. The Messages events the committed view releases
 * (FORMAT.md §1.1: in sequence order, each once a later Progress passes its time, void ones of an ended
 * incarnation dropped, those held at the end not delivered) are returned; {@link PartBatches} decodes them.
 */
final class PartRead {
    static final int MAX_EVENT_METADATA_BYTES = 16 << 20;
    static final long MAX_EVENT_BYTES = 1L << 30;
    /** An index larger than this is refused before it is read (16 + 32 bytes an event: 8 Mi events). */
    static final long MAX_INDEX_BYTES = 256L << 20;
    private static final Pattern SEALED = Pattern.compile("(\\d{20})\\.arrow");
    private static final byte[] MAGIC = {'A', 'R', 'R', 'O', 'W', '1', 0, 0};

    /** A Messages event to decode: its segment, byte range, seq and time. */
    static final class Msg {
        final int segment;
        final long offset;
        final int length;
        final long seq;
        final long[] time;

        Msg(int segment, long offset, int length, long seq, long[] time) {
            this.segment = segment;
            this.offset = offset;
            this.length = length;
            this.seq = seq;
            this.time = time;
        }
    }

    final ReadSpec spec;
    final int part;
    final Path dir;
    /** Each segment's name for messages: its local path, or {@code s3://bucket/key}. */
    final List<String> paths = new ArrayList<>();
    final List<ByteBuffer> maps = new ArrayList<>();
    private final List<Field> fields;
    private final long[] minimum;

    // the committed view
    private final Map<TimeKey, Long> counts = new HashMap<>();
    private final ArrayDeque<Msg> held = new ArrayDeque<>();
    private long epoch = -1;
    final List<Msg> released = new ArrayList<>();

    PartRead(ReadSpec spec, int part) throws IOException {
        this.spec = spec;
        this.part = part;
        this.dir = Paths.get(spec.streamDir, "part=" + part);
        this.fields = EventEncoder.readSchema(spec.schemaMessage).getFields();
        this.minimum = new long[Math.max(spec.arity, 1)];
        counts.put(new TimeKey(minimum), 1L);
    }

    private CorruptLogException corrupt(String what, long seq, long offset, String file) {
        return new CorruptLogException("CorruptLogError", what, spec.stream, part, seq, offset, file);
    }

    /** Read the part's events; the released Messages events are in {@link #released}. */
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
            if (first != next) {
                String why = s == 0 ? "events before seq " + first + " are not in the log (asked for seq 1)"
                    : "segment ends at seq " + (next - 1) + " but the next segment starts at " + first;
                throw new CorruptLogException("SequenceError", why, spec.stream, part, next, -1, where(dataName));
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

    /** One sealed segment; returns the seq after its last event. */
    private long segment(int s, long first, String dataName, String indexName) throws IOException {
        String data = where(dataName);
        String indexPath = where(indexName);
        ByteBuffer b = load(dataName);
        long size = b.capacity();
        paths.add(data);
        maps.add(b);
        // prefix: magic, schema message
        for (int i = 0; i < 8; i++) {
            if (size < 8 || b.get(i) != MAGIC[i]) {
                throw corrupt("damaged segment prefix: no Arrow file magic", -1, 0, data);
            }
        }
        if (size < 16 || b.getInt(8) != -1) {
            throw corrupt("damaged segment prefix: no schema message", -1, 8, data);
        }
        int schemaLen = b.getInt(12);
        if (schemaLen <= 0 || schemaLen > MAX_EVENT_METADATA_BYTES || 16L + schemaLen > size) {
            throw corrupt("damaged segment prefix: schema message of " + schemaLen + " bytes", -1, 12, data);
        }
        Schema schema;
        try {
            Message m = Message.getRootAsMessage(slice(b, 16, schemaLen));
            if (m.headerType() != MessageHeader.Schema || m.bodyLength() != 0) {
                throw new IllegalArgumentException("not a schema message");
            }
            schema = MessageSerializer.deserializeSchema(m);
        } catch (RuntimeException e) {
            throw corrupt("damaged segment prefix: " + e, -1, 16, data);
        }
        if (!schema.getFields().equals(fields)) {
            throw corrupt("segment schema is not the stream's: " + schema.getFields() + " vs " + fields, -1, 16, data);
        }
        long segEpoch = 0;
        Map<String, String> meta = schema.getCustomMetadata();
        if (meta != null && meta.containsKey("eventlog.epoch")) {
            try {
                segEpoch = Long.parseLong(meta.get("eventlog.epoch"));
            } catch (NumberFormatException e) {
                throw corrupt("segment metadata eventlog.epoch is not a number", -1, 16, data);
            }
        }
        if (segEpoch < epoch) {
            throw corrupt("segment has writer epoch " + segEpoch + ", lower than epoch " + epoch
                + " of the segment before it: two writer histories are interleaved", -1, 0, data);
        }
        long pos = 16L + schemaLen;

        // index: whole, verifying entries (a failing last entry, a partial entry or no index: framing)
        byte[] idx = index(indexName);
        int entries = 0;
        ByteBuffer ib = null;
        if (idx != null && idx.length >= 16) {
            ib = ByteBuffer.wrap(idx).order(ByteOrder.LITTLE_ENDIAN);
            if (ib.get(0) != 'E' || ib.get(1) != 'L' || ib.get(2) != 'I' || ib.get(3) != 'X'
                || (ib.getShort(4) & 0xffff) != 1 || ib.getLong(8) != first) {
                throw corrupt("damaged index header", -1, 0, indexPath);
            }
            entries = (idx.length - 16) / 32;
            CRC32 crc = new CRC32();
            for (int i = 0; i < entries; i++) {
                crc.reset();
                crc.update(idx, 16 + 32 * i, 28);
                if ((int) crc.getValue() != ib.getInt(16 + 32 * i + 28)) {
                    if (i == entries - 1) {
                        entries = i;  // a damaged last entry: the framing finds its event
                        break;
                    }
                    throw corrupt("index entry fails its checksum", first + i, 16 + 32L * i, indexPath);
                }
            }
        }

        List<long[]> places = new ArrayList<>();
        CRC32 crc = new CRC32();
        long seq = first;
        int i = 0;
        while (true) {
            int length;
            int kind = 0;
            if (i < entries) {
                int at = 16 + 32 * i;
                long eseq = ib.getLong(at);
                long off = ib.getLong(at + 8);
                length = ib.getInt(at + 16);
                int bodyCrc = ib.getInt(at + 20);
                kind = ib.get(at + 24);
                if (eseq != seq || off != pos || length <= 0 || (kind != 1 && kind != 2)) {
                    throw corrupt("index entry disagrees with the segment (seq " + eseq + ", offset " + off
                        + ", length " + length + ", kind " + kind + ")", seq, at, indexPath);
                }
                if (pos + (length & 0xffffffffL) > size) {
                    throw corrupt("index entry runs past the end of a sealed segment", seq, pos, data);
                }
                crc.reset();
                crc.update(slice(b, pos, length));
                if ((int) crc.getValue() != bodyCrc) {
                    throw corrupt("event fails its checksum", seq, pos, data);
                }
            } else {
                if (pos + 8 > size) {
                    throw corrupt("finished segment does not end with a whole event", seq, pos, data);
                }
                if (b.getInt((int) pos) != -1) {
                    throw corrupt("damaged event bytes in a finished segment: no IPC continuation marker", seq, pos,
                        data);
                }
                if (b.getInt((int) pos + 4) == 0) {
                    break;  // end-of-stream marker
                }
                length = -1;
            }
            Message m = message(b, size, pos, seq, data);
            long whole = 8L + b.getInt((int) pos + 4) + m.bodyLength();
            if (length >= 0 && whole != length) {
                throw corrupt("index entry of " + length + " bytes disagrees with the event's framing (" + whole
                    + " bytes)", seq, pos, data);
            }
            if (whole > MAX_EVENT_BYTES || pos + whole > size) {
                throw corrupt("finished segment does not end with a whole event", seq, pos, data);
            }
            event(s, m, pos, (int) whole, seq, kind, segEpoch, data);
            places.add(new long[] {pos, whole});
            pos += whole;
            seq++;
            i++;
        }
        footer(b, size, pos, places, data);
        return seq;
    }

    private Message message(ByteBuffer b, long size, long pos, long seq, String data) {
        int metaLen = b.getInt((int) pos + 4);
        if (metaLen <= 0 || metaLen > MAX_EVENT_METADATA_BYTES || pos + 8 + metaLen > size) {
            throw corrupt("damaged event metadata length " + metaLen, seq, pos, data);
        }
        try {
            Message m = Message.getRootAsMessage(slice(b, pos + 8, metaLen));
            if (m.headerType() != MessageHeader.RecordBatch || m.bodyLength() < 0) {
                throw new IllegalArgumentException("not a record batch message");
            }
            return m;
        } catch (RuntimeException e) {
            throw corrupt("undecodable event metadata: " + e, seq, pos, data);
        }
    }

    private void footer(ByteBuffer b, long size, long eos, List<long[]> places, String data) {
        long start = eos + 8;
        if (size < start + 10) {
            throw corrupt("sealed segment does not end with a whole footer after its end-of-stream marker", -1, eos,
                data);
        }
        int footerLen = b.getInt((int) size - 10);
        boolean magic = true;
        for (int k = 0; k < 6; k++) {
            magic &= b.get((int) size - 6 + k) == MAGIC[k];
        }
        if (!magic || footerLen <= 0 || size - 10 - footerLen != start) {
            throw corrupt("no whole footer after the end-of-stream marker (or bytes after it)", -1, start, data);
        }
        try {
            org.apache.arrow.flatbuf.Footer f = org.apache.arrow.flatbuf.Footer.getRootAsFooter(
                slice(b, start, footerLen));
            int n = f.recordBatchesLength();
            boolean same = n == places.size();
            Block block = new Block();
            for (int k = 0; same && k < n; k++) {
                f.recordBatches(block, k);
                same = block.offset() == places.get(k)[0]
                    && block.metaDataLength() + block.bodyLength() == places.get(k)[1];
            }
            if (!same) {
                throw corrupt("the footer lists " + n + " record batches that are not the segment's " + places.size()
                    + " events (offsets and lengths)", -1, start, data);
            }
        } catch (CorruptLogException e) {
            throw e;
        } catch (RuntimeException e) {
            throw corrupt("damaged footer: " + e, -1, start, data);
        }
    }

    // -- one event: its metadata, then the committed view -----------------------------------------------

    private void event(int s, Message m, long pos, int length, long seq, int indexKind, long segEpoch, String data) {
        String seqText = null;
        String kindText = null;
        String timeText = null;
        String updatesText = null;
        for (int k = 0; k < m.customMetadataLength(); k++) {
            KeyValue kv = m.customMetadata(k);
            String key = kv.key();
            if ("eventlog.seq".equals(key)) {
                seqText = kv.value();
            } else if ("eventlog.kind".equals(key)) {
                kindText = kv.value();
            } else if ("eventlog.time".equals(key)) {
                timeText = kv.value();
            } else if ("eventlog.updates".equals(key)) {
                updatesText = kv.value();
            }
        }
        if (seqText == null || !String.valueOf(seq).equals(seqText)) {
            throw corrupt("event carries seq " + seqText + ", its place in the segment is seq " + seq, seq, pos, data);
        }
        boolean messages = "messages".equals(kindText);
        if (!messages && !"progress".equals(kindText)) {
            throw corrupt("event kind " + kindText + " is neither messages nor progress", seq, pos, data);
        }
        if (indexKind != 0 && indexKind != (messages ? 1 : 2)) {
            throw corrupt("index kind " + indexKind + " disagrees with the event (" + kindText + ")", seq, pos, data);
        }
        if (epoch >= 0 && segEpoch > epoch && !held.isEmpty()) {
            for (Msg h : held) {  // the incarnation ended: its uncommitted messages are void
                if (committed(h.time)) {
                    released.add(h);
                }
            }
            held.clear();
        }
        epoch = Math.max(epoch, segEpoch);
        try {
            if (messages) {
                if (timeText == null) {
                    throw new IllegalArgumentException("Messages event without eventlog.time");
                }
                long[] t = time(Json.parse(timeText));
                if (committed(t)) {
                    throw new CorruptLogException("ProgressError", "Messages at time " + timeText
                        + " not in advance of the part's frontier", spec.stream, part, seq, pos, data.toString());
                }
                held.add(new Msg(s, pos, length, seq, t));
            } else {
                if (updatesText == null) {
                    throw new IllegalArgumentException("Progress event without eventlog.updates");
                }
                Object u = Json.parse(updatesText);
                if (!(u instanceof List)) {
                    throw new IllegalArgumentException("eventlog.updates is not a list");
                }
                for (Object pair : (List<?>) u) {
                    if (!(pair instanceof List) || ((List<?>) pair).size() != 2
                        || !(((List<?>) pair).get(1) instanceof Long)) {
                        throw new IllegalArgumentException("eventlog.updates holds " + pair);
                    }
                    TimeKey key = new TimeKey(time(((List<?>) pair).get(0)));
                    long c = counts.getOrDefault(key, 0L) + (Long) ((List<?>) pair).get(1);
                    if (c < 0) {
                        throw new CorruptLogException("ProgressError", "capability count of time " + key
                            + " goes negative", spec.stream, part, seq, pos, data.toString());
                    }
                    if (c == 0) {
                        counts.remove(key);
                    } else {
                        counts.put(key, c);
                    }
                }
                while (!held.isEmpty() && committed(held.peekFirst().time)) {
                    released.add(held.pollFirst());
                }
            }
        } catch (IllegalArgumentException e) {
            throw corrupt("damaged event metadata: " + e.getMessage(), seq, pos, data);
        }
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
                throw new IllegalArgumentException("time " + v + " is not an integer");
            }
            t = new long[] {(Long) v};
        } else {
            if (!(v instanceof List) || ((List<?>) v).size() != spec.arity) {
                throw new IllegalArgumentException("time " + v + " is not a list of " + spec.arity + " integers");
            }
            List<?> l = (List<?>) v;
            t = new long[spec.arity];
            for (int i = 0; i < t.length; i++) {
                if (!(l.get(i) instanceof Long)) {
                    throw new IllegalArgumentException("time " + v + " is not a list of integers");
                }
                t[i] = (Long) l.get(i);
            }
        }
        for (long c : t) {
            if (c < 0) {
                throw new IllegalArgumentException("negative time " + v);
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
            return t.length == 1 ? Long.toString(t[0]) : Arrays.toString(t);
        }
    }

    /** A minimal JSON reader for times and updates: integers and lists of them. */
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
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }

        private Object value(int depth) {
            if (depth > 4) {
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
            while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
                i++;
            }
            if (i == start || (c == '-' && i == start + 1)) {
                throw new IllegalArgumentException("not an integer at " + start + " of " + s);
            }
            return Long.parseLong(s.substring(start, i));
        }
    }

    static String utf8(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }
}
