package eventlog.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The checks eventlog's Python reader makes of an Arrow IPC message before and while pyarrow reads it, written
 * again here so that the JVM reader accepts exactly the messages it accepts:
 * <ul>
 * <li>{@link #recordBatch}: {@code eventlog/encoding/ipc_message.py::check_in_python} — what a record-batch
 * message declares (rows, array lengths, buffer places, decompressed sizes), bounds-checked and held to the
 * format's limits (FORMAT.md §8) before anything is allocated for it;</li>
 * <li>{@link #verifyMessage}: the flatbuffers verifier Arrow C++ runs on every message it opens (offsets, sizes
 * and alignment of every table, vector and string of {@code Message.fbs}/{@code Schema.fbs}; depth 128, at most
 * 8 tables a byte), then its metadata-version check;</li>
 * <li>{@link #withoutRows}: {@code _ipc_native.c::empty}, the walk that reads an event without rows (Progress)
 * from its custom metadata alone;</li>
 * <li>{@link #footerBlocks}: {@code eventlog/encoding/ipc_file.py::footer_blocks}.</li>
 * </ul>
 * A refused message raises {@link Bad}: the Python error's name ({@code CorruptLogError}, {@code LogLimitError})
 * and why.
 */
final class IpcChecks {
    static final long MAX_EVENT_RECORDS = 1L << 20;
    static final long MAX_EVENT_VALUES = 1L << 24;
    static final long MAX_EVENT_DECODED_BYTES = 1L << 30;
    static final long MAX_EXPANSION_RATIO = 1L << 16;
    static final long MAX_EVENT_METADATA_BYTES = 16L << 20;
    static final long MAX_EVENT_BYTES = 1L << 30;
    static final long MAX_EVENT_UPDATES = 1L << 20;
    static final int SCHEMA = 1;
    static final int RECORD_BATCH = 3;
    private static final int ZSTD = 1;
    private static final int LZ4_FRAME = 0;

    private IpcChecks() {
    }

    /** A message the Python reader refuses: {@code kind} is its error's name. */
    static final class Bad extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final String kind;

        Bad(String kind, String message) {
            super(message, null, false, false);
            this.kind = kind;
        }
    }

    static Bad malformed(String why) {
        return new Bad("CorruptLogError", why);
    }

    private static Bad limit(String why) {
        return new Bad("LogLimitError", why);
    }

    /** What a record-batch message declares. */
    static final class Batch {
        final long rows;
        final long end;

        Batch(long rows, long end) {
            this.rows = rows;
            this.end = end;
        }
    }

    // -- bounds-checked reads of a flatbuffer (ipc_message.py::_Flatbuffer) ----------------------------------

    /** A flatbuffer at {@code [base, base + n)} of {@code b}; every read outside raises {@link Bad}. */
    private static class Fb {
        final ByteBuffer b;
        final long base;
        final long n;

        Fb(ByteBuffer b, long base, long n) {
            this.b = b;
            this.base = base;
            this.n = n;
        }

        private long at(long pos, int size) {
            if (pos < 0 || pos > n - size) {
                throw malformed("IPC metadata offset " + pos + " is outside its " + n + " bytes");
            }
            return base + pos;
        }

        long u8(long pos) {
            return b.get((int) at(pos, 1)) & 0xffL;
        }

        long i8(long pos) {
            return b.get((int) at(pos, 1));
        }

        long u16(long pos) {
            return b.getShort((int) at(pos, 2)) & 0xffffL;
        }

        long i32(long pos) {
            return b.getInt((int) at(pos, 4));
        }

        long u32(long pos) {
            return b.getInt((int) at(pos, 4)) & 0xffffffffL;
        }

        long i64(long pos) {
            return b.getLong((int) at(pos, 8));
        }

        long ref(long pos) {
            return pos + u32(pos);
        }

        /** The table at {@code pos}: {pos, vtable, vtable size}. */
        long[] table(long pos) {
            long vtable = pos - i32(pos);
            long vtSize = u16(vtable);
            if (vtSize < 4 || vtSize % 2 != 0) {
                throw malformed("IPC metadata vtable of " + vtSize + " bytes");
            }
            u16(vtable + vtSize - 2);  // the whole vtable lies inside the buffer
            return new long[] {pos, vtable, vtSize};
        }

        /** Absolute position of field {@code i} of table {@code t}, or 0 when absent. */
        long field(long[] t, int i) {
            long at = 4 + 2L * i;
            if (at >= t[2]) {
                return 0;
            }
            long off = u16(t[1] + at);
            return off != 0 ? t[0] + off : 0;
        }

        long[] subtable(long[] t, int i) {
            long at = field(t, i);
            return at != 0 ? table(ref(at)) : null;
        }

        /** {start, count} of vector field {@code i} of {@code itemSize}-byte items ({0, 0} when absent). */
        long[] vector(long[] t, int i, int itemSize) {
            long at = field(t, i);
            if (at == 0) {
                return new long[] {0, 0};
            }
            long start = ref(at);
            long count = u32(start);
            if (count * itemSize > n - start - 4) {
                throw malformed("IPC metadata vector of " + count + " items runs past the metadata");
            }
            return new long[] {start + 4, count};
        }
    }

    private static long saturatingAdd(long sum, long x) {
        return x > Long.MAX_VALUE - sum ? Long.MAX_VALUE : sum + x;
    }

    /** {@code decoded_bytes_bound}: the most bytes an event of {@code stored} bytes may decompress to. */
    static long decodedBytesBound(long stored) {
        return Math.min(MAX_EVENT_DECODED_BYTES, MAX_EXPANSION_RATIO * Math.max(stored, 1));
    }

    /**
     * The record-batch message filling {@code [start, start + length)} of {@code b}, checked as
     * {@code arrow.py::_check_message} checks it (the event's stored size, then {@code check_in_python}, then
     * that the message fills the event exactly).
     */
    static Batch recordBatch(ByteBuffer b, long start, long length) {
        if (length > MAX_EVENT_BYTES) {
            throw limit("stored size in bytes of one event is " + length + ", over the format's limit of "
                + MAX_EVENT_BYTES);
        }
        ByteBuffer buf = b.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        long len = length;
        long pos = 0;
        if (len - pos < 8) {
            throw malformed("IPC message is truncated");
        }
        Fb all = new Fb(buf, start, len);
        long size = all.u32(pos);
        if (size == 0xffffffffL) {
            pos += 4;
            size = all.u32(pos);
        }
        pos += 4;
        if (size > MAX_EVENT_METADATA_BYTES) {
            throw limit("event's IPC metadata is " + size + " bytes, over the format's limit of "
                + MAX_EVENT_METADATA_BYTES);
        }
        if (size < 8 || size > len - pos) {
            throw malformed("IPC metadata of " + size + " bytes does not fit the " + (len - pos) + " bytes left");
        }
        Fb fb = new Fb(buf, start + pos, size);
        long[] message = fb.table(fb.ref(0));
        long at = fb.field(message, 1);
        if ((at != 0 ? fb.u8(at) : 0) != RECORD_BATCH) {
            throw malformed("IPC message is not a record batch");
        }
        at = fb.field(message, 3);
        long bodyLen = at != 0 ? fb.i64(at) : 0;
        long body = pos + size;
        if (bodyLen < 0 || bodyLen > len - body) {
            throw malformed("IPC body of " + bodyLen + " bytes does not fit the " + (len - body) + " bytes left");
        }
        long[] batch = fb.subtable(message, 2);
        if (batch == null) {
            throw malformed("IPC record batch message without its header");
        }
        at = fb.field(batch, 0);
        long rows = at != 0 ? fb.i64(at) : 0;
        if (rows < 0) {
            throw malformed("record batch declares " + rows + " rows");
        }
        if (rows > MAX_EVENT_RECORDS) {
            throw limit("event holds " + rows + " records, over the format's limit of " + MAX_EVENT_RECORDS);
        }
        long[] nodes = fb.vector(batch, 1, 16);
        long values = 0;
        for (long i = 0; i < nodes[1]; i++) {
            long length1 = fb.i64(nodes[0] + 16 * i);
            if (length1 < 0) {
                throw malformed("array " + i + " declares length " + length1);
            }
            values = saturatingAdd(values, length1);
        }
        if (values > MAX_EVENT_VALUES) {
            throw limit("event holds " + values + " values (array slots), over the format's limit of "
                + MAX_EVENT_VALUES);
        }
        long[] compression = fb.subtable(batch, 3);
        Long codec = null;
        if (compression != null) {
            at = fb.field(compression, 0);
            codec = at != 0 ? fb.i8(at) : 0L;
        }
        if (codec != null && codec != ZSTD && codec != LZ4_FRAME) {
            throw malformed("IPC body compression " + codec + " is neither LZ4_FRAME (0) nor ZSTD (1)");
        }
        long[] bufs = fb.vector(batch, 2, 16);
        long decoded = 0;
        for (long i = 0; i < bufs[1]; i++) {
            long offset = fb.i64(bufs[0] + 16 * i);
            long blen = fb.i64(bufs[0] + 16 * i + 8);
            if (offset < 0 || blen < 0 || offset > bodyLen - blen) {
                throw malformed("IPC buffer " + i + " (" + offset + ", " + blen + ") lies outside the " + bodyLen
                    + "-byte body");
            }
            if (codec == null || blen == 0) {
                decoded = saturatingAdd(decoded, blen);
                continue;
            }
            if (blen < 8) {
                throw malformed("compressed IPC buffer " + i + " of " + blen + " bytes has no length prefix");
            }
            long declared = all.i64(body + offset);
            if (declared < -1) {
                throw malformed("compressed IPC buffer " + i + " declares " + declared + " bytes");
            }
            decoded = saturatingAdd(decoded, declared == -1 ? blen - 8 : declared);
        }
        long[] counts = fb.vector(batch, 4, 8);
        long variadic = 0;
        boolean negative = false;
        for (long i = 0; i < counts[1]; i++) {
            long c = fb.i64(counts[0] + 8 * i);
            negative |= c < 0;
            variadic += c;  // (Python's sum: exact; a sum past a long cannot be at most the buffer count)
        }
        if (negative || variadic > bufs[1]) {
            throw malformed("record batch declares " + variadic + " variadic buffers, it has " + bufs[1]);
        }
        long end = body + bodyLen;
        long bound = decodedBytesBound(end);
        if (decoded > bound) {
            throw limit("event's buffers declare " + decoded + " bytes once decompressed, over the format's limit of "
                + bound + " for an event of " + end + " bytes");
        }
        if (end != length) {
            throw malformed("the event's IPC message is " + end + " bytes, its body " + length);
        }
        return new Batch(rows, end);
    }

    // -- an event without rows, read from its metadata alone (_ipc_native.c::empty) ---------------------------

    /** What {@link #withoutRows} reads: the counts of FieldNodes and Buffers, and the custom metadata pairs. */
    static final class Empty {
        final long nodes;
        final long buffers;
        final List<String[]> pairs;

        Empty(long nodes, long buffers, List<String[]> pairs) {
            this.nodes = nodes;
            this.buffers = buffers;
            this.pairs = pairs;
        }
    }

    /**
     * The walk the Python reader reads a message without rows with (a Progress event), without pyarrow: null
     * when it finds the message malformed (the Python reader then has pyarrow open it, which verifies it). The
     * message is known to hold a record batch within its event ({@link #recordBatch} passed).
     */
    static Empty withoutRows(ByteBuffer b, long start, long length) {
        try {
            ByteBuffer buf = b.duplicate().order(ByteOrder.LITTLE_ENDIAN);
            Fb all = new Fb(buf, start, length);
            long pos = 0;
            long size = all.u32(pos);
            if (size == 0xffffffffL) {
                pos += 4;
                size = all.u32(pos);
            }
            pos += 4;
            Fb fb = new Fb(buf, start + pos, size);
            long[] message = fb.table(fb.ref(0));
            long[] batch = fb.subtable(message, 2);
            long[] nodes = fb.vector(batch, 1, 16);
            long[] bufs = fb.vector(batch, 2, 16);
            long[] kvs = fb.vector(message, 4, 4);
            if (kvs[1] > 64) {
                return null;
            }
            List<String[]> pairs = new ArrayList<>();
            for (long i = 0; i < kvs[1]; i++) {
                long[] kv = fb.table(fb.ref(kvs[0] + 4 * i));
                long k = fb.field(kv, 0);
                long v = fb.field(kv, 1);
                if (k == 0 || v == 0) {
                    return null;
                }
                pairs.add(new String[] {string(fb, k), string(fb, v)});
            }
            return new Empty(nodes[1], bufs[1], pairs);
        } catch (Bad e) {
            return null;
        }
    }

    /** The flatbuffer string at the uoffset stored at {@code pos}, decoded as UTF-8 (its bytes, lossless). */
    private static String string(Fb fb, long pos) {
        long s = fb.ref(pos);
        long n = fb.u32(s);
        if (n > fb.n - s - 4) {
            throw malformed("string outside the metadata");
        }
        byte[] out = new byte[(int) n];
        fb.b.duplicate().position((int) (fb.base + s + 4)).get(out);
        return new String(out, StandardCharsets.ISO_8859_1);  // bytes as chars: compared with ASCII keys only
    }

    // -- the flatbuffers verifier, as Arrow C++ runs it on a message ------------------------------------------

    /**
     * True when the flatbuffer {@code [base, base + n)} of {@code b} passes the verifier Arrow C++ runs before
     * it reads a message ({@code VerifyMessage}: {@code flatbuffers::Verifier} with depth 128 and 8 tables a
     * byte, the root a {@code Message}) and the message's metadata version is one it reads (V4, V5).
     */
    static boolean verifyMessage(ByteBuffer b, long base, long n) {
        Verifier v = new Verifier(b.duplicate().order(ByteOrder.LITTLE_ENDIAN), base, n);
        try {
            if (!v.message()) {
                return false;
            }
            Fb fb = new Fb(v.b, base, n);
            long[] message = fb.table(fb.ref(0));
            long at = fb.field(message, 0);
            long version = at != 0 ? (short) fb.u16(at) : 0;
            return version >= 3 && version <= 4;
        } catch (Bad | IndexOutOfBoundsException e) {
            return false;
        }
    }

    /** {@code flatbuffers::Verifier} over one buffer, with Arrow's generated {@code Verify} of each table. */
    private static final class Verifier extends Fb {
        private static final long MAX_SIZE = Integer.MAX_VALUE;  // FLATBUFFERS_MAX_BUFFER_SIZE
        final long size;
        private final long maxTables;
        private int depth;
        private long tables;

        Verifier(ByteBuffer b, long base, long size) {
            super(b, base, size);
            this.size = size;
            this.maxTables = 8 * size;
        }

        private boolean in(long elem, long len) {
            return elem >= 0 && len < size && elem <= size - len;
        }

        private static boolean aligned(long elem, int align) {
            return (elem & (align - 1)) == 0;
        }

        private boolean scalar(long elem, int len) {
            return aligned(elem, len) && in(elem, len);
        }

        /** {@code VerifyOffset(start)}: the uoffset at {@code start}, 0 when it fails. */
        private long offset(long start) {
            if (!scalar(start, 4)) {
                return 0;
            }
            long o = u32(start);
            if (o == 0 || (int) o < 0 || !in(start + o, 1)) {
                return 0;
            }
            return o;
        }

        /** {@code VerifyTableStart}; returns {pos, vtable} or null. */
        private long[] tableStart(long table) {
            if (!scalar(table, 4)) {
                return null;
            }
            long vtable = table - i32(table);
            depth++;
            tables++;
            if (depth > 128 || tables > maxTables) {
                return null;
            }
            if (!scalar(vtable, 2)) {
                return null;
            }
            long vsize = u16(vtable);
            if (!aligned(vsize, 2) || !in(vtable, vsize)) {
                return null;
            }
            return new long[] {table, vtable};
        }

        private boolean end() {
            depth--;
            return true;
        }

        /** {@code GetOptionalFieldOffset}: the field's offset in the table, 0 when absent. */
        private long fieldOffset(long[] t, int vt) {
            long vsize = u16(t[1]);
            return vt < vsize ? u16(t[1] + vt) : 0;
        }

        private boolean field(long[] t, int vt, int len) {
            long f = fieldOffset(t, vt);
            return f == 0 || scalar(t[0] + f, len);
        }

        /** {@code VerifyOffset(verifier, vt)}: true when the offset field is absent or verifies. */
        private boolean offsetField(long[] t, int vt) {
            long f = fieldOffset(t, vt);
            return f == 0 || offset(t[0] + f) != 0;
        }

        /** The position the (verified) offset field points to, or -1 when absent. */
        private long pointer(long[] t, int vt) {
            long f = fieldOffset(t, vt);
            return f == 0 ? -1 : t[0] + f + u32(t[0] + f);
        }

        /** {@code VerifyVectorOrString}: the vector's end, or -1 when it fails. */
        private long vector(long vec, long elemSize) {
            if (!scalar(vec, 4)) {
                return -1;
            }
            long n = u32(vec);
            if (n >= MAX_SIZE / elemSize) {
                return -1;
            }
            long bytes = 4 + elemSize * n;
            return in(vec, bytes) ? vec + bytes : -1;
        }

        private boolean vectorField(long[] t, int vt, long elemSize) {
            long p = pointer(t, vt);
            return p < 0 || vector(p, elemSize) >= 0;
        }

        private boolean string(long[] t, int vt) {
            long p = pointer(t, vt);
            if (p < 0) {
                return true;
            }
            long end = vector(p, 1);
            return end >= 0 && in(end, 1) && u8(end) == 0;
        }

        interface TableCheck {
            boolean verify(long table);
        }

        /** A vector of tables: the vector, then each element's table. */
        private boolean tables(long[] t, int vt, TableCheck check) {
            long p = pointer(t, vt);
            if (p < 0) {
                return true;
            }
            if (vector(p, 4) < 0) {
                return false;
            }
            long n = u32(p);
            for (long i = 0; i < n; i++) {
                long elem = p + 4 + 4 * i;
                if (!check.verify(elem + u32(elem))) {
                    return false;
                }
            }
            return true;
        }

        private boolean table(long[] t, int vt, TableCheck check) {
            if (!offsetField(t, vt)) {
                return false;
            }
            long p = pointer(t, vt);
            return p < 0 || check.verify(p);
        }

        boolean message() {
            if (size < 12) {  // FLATBUFFERS_MIN_BUFFER_SIZE
                return false;
            }
            long o = offset(0);
            return o != 0 && messageTable(o);
        }

        private boolean messageTable(long pos) {
            long[] t = tableStart(pos);
            if (t == null || !field(t, 4, 2) || !field(t, 6, 1) || !offsetField(t, 8)) {
                return false;
            }
            long f = fieldOffset(t, 6);
            int headerType = f == 0 ? 0 : (int) u8(t[0] + f);
            long header = pointer(t, 8);
            if (header >= 0) {
                boolean ok = true;
                if (headerType == SCHEMA) {
                    ok = schemaTable(header);
                } else if (headerType == 2) {
                    ok = dictionaryBatchTable(header);
                } else if (headerType == RECORD_BATCH) {
                    ok = recordBatchTable(header);
                } else if (headerType == 4 || headerType == 5) {
                    ok = tableStart(header) != null && end();  // Tensor, SparseTensor: refused anyway
                }
                if (!ok) {
                    return false;
                }
            }
            return field(t, 10, 8) && offsetField(t, 12) && vectorField(t, 12, 4)
                && tables(t, 12, this::keyValue) && end();
        }

        private boolean keyValue(long pos) {
            long[] t = tableStart(pos);
            return t != null && offsetField(t, 4) && string(t, 4) && offsetField(t, 6) && string(t, 6) && end();
        }

        private boolean schemaTable(long pos) {
            long[] t = tableStart(pos);
            return t != null && field(t, 4, 2) && offsetField(t, 6) && vectorField(t, 6, 4)
                && tables(t, 6, this::fieldTable) && offsetField(t, 8) && vectorField(t, 8, 4)
                && tables(t, 8, this::keyValue) && offsetField(t, 10) && vectorField(t, 10, 8) && end();
        }

        private boolean fieldTable(long pos) {
            long[] t = tableStart(pos);
            if (t == null || !offsetField(t, 4) || !string(t, 4) || !field(t, 6, 1) || !field(t, 8, 1)
                || !offsetField(t, 10)) {
                return false;
            }
            long f = fieldOffset(t, 8);
            int type = f == 0 ? 0 : (int) u8(t[0] + f);
            long p = pointer(t, 10);
            if (p >= 0 && !typeTable(type, p)) {
                return false;
            }
            return table(t, 12, this::dictionaryEncoding) && offsetField(t, 14) && vectorField(t, 14, 4)
                && tables(t, 14, this::fieldTable) && offsetField(t, 16) && vectorField(t, 16, 4)
                && tables(t, 16, this::keyValue) && end();
        }

        private boolean dictionaryEncoding(long pos) {
            long[] t = tableStart(pos);
            return t != null && field(t, 4, 8) && table(t, 6, p -> typeTable(2, p)) && field(t, 8, 1)
                && field(t, 10, 2) && end();
        }

        /** The table of a {@code Type} union member (Schema.fbs). */
        private boolean typeTable(int type, long pos) {
            long[] t;
            switch (type) {
                case 2:  // Int: bitWidth int, is_signed bool
                    t = tableStart(pos);
                    return t != null && field(t, 4, 4) && field(t, 6, 1) && end();
                case 3: case 8: case 11: case 18:  // FloatingPoint, Date, Interval, Duration: a short
                    t = tableStart(pos);
                    return t != null && field(t, 4, 2) && end();
                case 7:  // Decimal: precision, scale, bitWidth ints
                    t = tableStart(pos);
                    return t != null && field(t, 4, 4) && field(t, 6, 4) && field(t, 8, 4) && end();
                case 9:  // Time: unit short, bitWidth int
                    t = tableStart(pos);
                    return t != null && field(t, 4, 2) && field(t, 6, 4) && end();
                case 10:  // Timestamp: unit short, timezone string
                    t = tableStart(pos);
                    return t != null && field(t, 4, 2) && offsetField(t, 6) && string(t, 6) && end();
                case 14:  // Union: mode short, typeIds [int]
                    t = tableStart(pos);
                    return t != null && field(t, 4, 2) && offsetField(t, 6) && vectorField(t, 6, 4) && end();
                case 15: case 16:  // FixedSizeBinary byteWidth, FixedSizeList listSize: an int
                    t = tableStart(pos);
                    return t != null && field(t, 4, 4) && end();
                case 17:  // Map: keysSorted bool
                    t = tableStart(pos);
                    return t != null && field(t, 4, 1) && end();
                case 1: case 4: case 5: case 6: case 12: case 13: case 19: case 20: case 21: case 22: case 23:
                case 24: case 25: case 26:  // tables without fields
                    t = tableStart(pos);
                    return t != null && end();
                default:  // NONE and types this verifier does not know: not verified
                    return true;
            }
        }

        private boolean recordBatchTable(long pos) {
            long[] t = tableStart(pos);
            return t != null && field(t, 4, 8) && offsetField(t, 6) && vectorField(t, 6, 16) && offsetField(t, 8)
                && vectorField(t, 8, 16) && table(t, 10, this::bodyCompression) && offsetField(t, 12)
                && vectorField(t, 12, 8) && end();
        }

        private boolean bodyCompression(long pos) {
            long[] t = tableStart(pos);
            return t != null && field(t, 4, 1) && field(t, 6, 1) && end();
        }

        private boolean dictionaryBatchTable(long pos) {
            long[] t = tableStart(pos);
            return t != null && field(t, 4, 8) && table(t, 6, this::recordBatchTable) && field(t, 8, 1) && end();
        }
    }

    // -- the footer of a sealed segment (ipc_file.py::footer_blocks) ----------------------------------------

    /** {offset, metadata length, body length} of each Block the footer {@code [base, base + n)} lists. */
    static List<long[]> footerBlocks(ByteBuffer b, long base, long n) {
        Fb fb = new Fb(b.duplicate().order(ByteOrder.LITTLE_ENDIAN), base, n);
        long table = fb.u32(0);
        long vtable = table - fb.i32(table);
        long vtSize = fb.u16(vtable);
        if (vtSize < 4 + 2 * 4 || vtSize % 2 != 0) {
            throw malformed("footer without record batches");
        }
        long rel = fb.u16(vtable + 4 + 2 * 3);
        List<long[]> out = new ArrayList<>();
        if (rel == 0) {
            return out;
        }
        long at = table + rel;
        long vec = at + fb.u32(at);
        long count = fb.u32(vec);
        if (count > (n - vec - 4) / 24) {
            throw malformed("footer declares " + count + " blocks, more than it holds");
        }
        for (long i = 0; i < count; i++) {
            long p = vec + 4 + 24 * i;
            out.add(new long[] {fb.i64(p), fb.i32(p + 8), fb.i64(p + 16)});
        }
        return out;
    }
}
