package eventlog.spark;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseLargeVariableWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.Decimal256Vector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.LargeVarCharVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.BaseVariableWidthViewVector;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.NoCompressionCodec;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.MapVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.arrow.vector.util.ValueVectorUtility;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The rows of one replay worker: for each of its parts ({@link PartRead}), every Messages event decoded in
 * sequence order as the Python reader decodes it (zstd buffers, every batch validated as pyarrow's full
 * validation does, its {@code _time} and {@code _seq} columns checked against the event's time and seq), and the
 * rows of those the committed view delivers at times the planned frontier completed, as rows of the stream's
 * columns followed by {@code _time}, {@code _part}, {@code _seq} — the Python reader's columns. Each event's
 * vectors are reused for the next one, so a task holds one decoded event at a time.
 *
 * <p>Where the first pass finds damage, the Messages events before it are decoded first (and the damaged one,
 * when its damage lies in what is read after its records): the Python reader decodes each event as it reads it,
 * so a batch that does not decode fails first.
 */
final class PartBatches implements Iterator<InternalRow>, AutoCloseable {
    private final ReadSpec spec;
    private final Iterator<Integer> parts;
    private final BufferAllocator alloc;
    private final VectorSchemaRoot root;
    private final ExactZstd codec = new ExactZstd();
    private final List<Field> fields;
    private final int nRecords;
    private PartRead current;
    private Iterator<PartRead.Msg> msgs = Collections.emptyIterator();
    private Iterator<InternalRow> rows = Collections.emptyIterator();

    PartBatches(ReadSpec spec, List<Integer> parts, BufferAllocator alloc) throws IOException {
        this.spec = spec;
        this.parts = parts.iterator();
        this.alloc = alloc;
        Schema schema = EventEncoder.readSchema(spec.schemaMessage);
        this.root = VectorSchemaRoot.create(schema, alloc);
        this.fields = schema.getFields();
        this.nRecords = fields.size() - 2;
    }

    @Override
    public boolean hasNext() {
        while (!rows.hasNext()) {
            try {
                while (!msgs.hasNext()) {
                    if (!parts.hasNext()) {
                        return false;
                    }
                    current = new PartRead(spec, parts.next());
                    try {
                        current.read();
                    } catch (CorruptLogException e) {
                        for (PartRead.Msg m : current.messages) {  // what the Python reader decoded before
                            if (e.seq == 0 || m.seq <= e.seq) {  // (an error of no event: after every one read)
                                load(m);
                            }
                        }
                        throw e;
                    }
                    msgs = current.messages.iterator();
                }
                PartRead.Msg m = msgs.next();
                int n = load(m);
                if (m.released && complete(m.time)) {
                    rows = rowsOf(n);
                }
            } catch (IOException e) {
                throw new java.io.UncheckedIOException("eventlog JVM reader: stream " + spec.stream + ": " + e, e);
            }
        }
        return true;
    }

    @Override
    public InternalRow next() {
        if (!hasNext()) {
            throw new NoSuchElementException();
        }
        return rows.next();
    }

    private boolean complete(long[] t) {
        if (spec.frontier == null) {
            return true;
        }
        for (long[] f : spec.frontier) {
            if (PartRead.lessEqual(f, t)) {
                return false;
            }
        }
        return true;
    }

    private CorruptLogException corrupt(String what, PartRead.Msg m) {
        return new CorruptLogException("CorruptLogError", what, spec.stream, current.part, m.seq, m.offset,
            current.paths.get(m.segment).toString());
    }

    /**
     * Decode {@code m} into the vectors and check it as the Python reader does (the message was bounded and
     * verified by the first pass); returns its row count. Its {@code _time} and {@code _seq} columns are checked
     * once its time is known.
     */
    private int load(PartRead.Msg m) {
        ByteBuffer b = current.maps.get(m.segment);
        int at = (int) m.offset;
        int metaLen = b.getInt(at + 4);
        ByteBuffer meta = b.duplicate().position(at + 8).limit(at + 8 + metaLen).slice().order(ByteOrder.LITTLE_ENDIAN);
        int rowsN;
        try {
            Message msg = Message.getRootAsMessage(meta);
            org.apache.arrow.flatbuf.RecordBatch fb = (org.apache.arrow.flatbuf.RecordBatch) msg.header(
                new org.apache.arrow.flatbuf.RecordBatch());
            org.apache.arrow.flatbuf.BodyCompression compression = fb.compression();
            if (compression != null && compression.method() != 0) {
                throw new IllegalArgumentException("body compression method " + compression.method());
            }
            long bodyLen = msg.bodyLength();
            ByteBuffer bodyBytes = b.duplicate().position(at + 8 + metaLen).limit((int) (at + 8 + metaLen + bodyLen))
                .slice();
            ArrowBuf body = alloc.buffer(Math.max(bodyLen, 1));
            ArrowRecordBatch batch;
            try {
                body.setBytes(0, bodyBytes);
                body.writerIndex(bodyLen);
                // takes over this reference to body once it returns: the batch's buffers (and, after load, the
                // vectors holding buffers stored uncompressed) keep body alive, each through a reference of its own
                batch = MessageSerializer.deserializeRecordBatch(msg, body);
            } catch (RuntimeException | IOException e) {
                body.close();
                throw e;
            }
            try (batch) {
                rowsN = batch.getLength();
                List<ArrowFieldNode> nodes = batch.getNodes();
                codec.prepare(batch, fields);
                boolean compressed = batch.getBodyCompression().getCodec() != NoCompressionCodec.COMPRESSION_TYPE;
                Iterator<ArrowBuf> buffers = batch.getBuffers().iterator();
                Iterator<ArrowFieldNode> nodeIt = nodes.iterator();
                Iterator<Long> variadic = batch.getVariadicBufferCounts().iterator();
                for (FieldVector v : root.getFieldVectors()) {
                    loadBuffers(v, v.getField(), buffers, nodeIt, compressed ? codec : NoCompressionCodec.INSTANCE,
                        compressed, variadic);
                }
                // checked at the lengths the field nodes declare, before the row count resizes the vectors
                int[] node = {0};
                for (FieldVector v : root.getFieldVectors()) {
                    if (v.getValueCount() != rowsN) {
                        throw new IllegalArgumentException("Array length did not match record batch length");
                    }
                    validate(v, nodes, node);
                }
                root.setRowCount(rowsN);
            }
        } catch (CorruptLogException e) {
            throw e;
        } catch (RuntimeException | IOException e) {
            throw corrupt("undecodable event: " + e, m);
        }
        if (m.time != null) {
            checkLogColumns(m, rowsN);
        }
        return rowsN;
    }

    /**
     * {@code VectorLoader.loadBuffers}: the next field node and buffers (decompressed) into {@code vector} and its
     * children. Unlike {@code VectorLoader.load} it leaves the row count to the caller (which sets it once the
     * vectors are checked at their declared lengths: setting it grows a buffer that is too small) and, as Arrow
     * C++, does not refuse field nodes or buffers left over.
     */
    private static void loadBuffers(FieldVector vector, Field field, Iterator<ArrowBuf> buffers,
                                    Iterator<ArrowFieldNode> nodes, CompressionCodec codec, boolean compressed,
                                    Iterator<Long> variadic) {
        if (!nodes.hasNext()) {
            throw new IllegalArgumentException("no more field nodes for field " + field);
        }
        ArrowFieldNode node = nodes.next();
        long extra = 0;
        if (vector instanceof BaseVariableWidthViewVector) {
            if (!variadic.hasNext()) {
                throw new IllegalArgumentException("no variadic buffer count for field " + field);
            }
            extra = variadic.next();
        }
        long count = extra + TypeLayout.getTypeBufferCount(field.getType());
        List<ArrowBuf> own = new ArrayList<>();
        for (long j = 0; j < count; j++) {
            if (!buffers.hasNext()) {
                throw new IllegalArgumentException("no more buffers for field " + field);
            }
            ArrowBuf next = buffers.next();
            own.add(next.writerIndex() > 0 ? codec.decompress(vector.getAllocator(), next) : next);
            if (compressed) {
                next.getReferenceManager().retain();  // (decompress gave up the reference it was handed)
            }
        }
        try {
            vector.loadFieldBuffers(node, own);
        } finally {
            if (compressed) {
                for (ArrowBuf buf : own) {
                    buf.close();
                }
            }
        }
        List<Field> children = field.getChildren();
        List<FieldVector> childVectors = vector.getChildrenFromFields();
        for (int i = 0; i < children.size() && i < childVectors.size(); i++) {
            loadBuffers(childVectors.get(i), children.get(i), buffers, nodes, codec, compressed, variadic);
        }
    }

    /** The decoded event's rows. */
    private Iterator<InternalRow> rowsOf(int rowsN) {
        List<FieldVector> vectors = root.getFieldVectors();
        ColumnVector[] cols = new ColumnVector[nRecords + 3];
        for (int i = 0; i < nRecords; i++) {
            cols[i] = new ArrowColumnVector(vectors.get(i));
        }
        cols[nRecords] = new ArrowColumnVector(vectors.get(nRecords));
        ConstantColumnVector partCol = new ConstantColumnVector(rowsN, DataTypes.IntegerType);
        partCol.setInt(current.part);
        cols[nRecords + 1] = partCol;
        cols[nRecords + 2] = new ArrowColumnVector(vectors.get(nRecords + 1));
        return new ColumnarBatch(cols, rowsN).rowIterator();
    }

    /**
     * What pyarrow's full validation checks of a vector and its children (in the pre-order of the message's
     * field nodes, {@code node[0]} the next one): {@code ValueVectorUtility.validateFull} (offsets, lengths,
     * buffer sizes), the null count each field node declares (Arrow Java counts the validity bitmap instead),
     * UTF-8 strings, decimals within their precision, map keys without nulls. Map vectors (which Arrow Java 19's
     * validator refuses as a type mismatch) get their offsets checked here.
     */
    private static void validate(ValueVector v, List<ArrowFieldNode> nodes, int[] node) {
        Field f = v.getField();
        if (node[0] < nodes.size()) {
            ArrowFieldNode n = nodes.get(node[0]);
            long declared = n.getNullCount();
            if (f.getType() instanceof ArrowType.Null ? declared != n.getLength()
                : declared != 0 && declared != n.getLength() && declared != v.getNullCount()) {
                throw new IllegalArgumentException("null_count value (" + declared + ") doesn't match actual number of "
                    + "nulls in array (" + v.getNullCount() + ")");
            }
        }
        node[0]++;
        if (v instanceof MapVector) {
            MapVector map = (MapVector) v;
            int n = map.getValueCount();
            ValueVector entries = map.getDataVector();
            if (n > 0) {
                int prev = map.getOffsetBuffer().getInt(0);
                if (prev < 0) {
                    throw new IllegalArgumentException("map offsets start at " + prev);
                }
                for (int i = 1; i <= n; i++) {
                    int o = map.getOffsetBuffer().getInt(4L * i);
                    if (o < prev) {
                        throw new IllegalArgumentException("map offsets decrease at " + i);
                    }
                    prev = o;
                }
                if (prev > entries.getValueCount()) {
                    throw new IllegalArgumentException("map offsets past its " + entries.getValueCount() + " entries");
                }
            }
            validate(entries, nodes, node);
            if (entries instanceof StructVector && !((StructVector) entries).getChildrenFromFields().isEmpty()
                && ((StructVector) entries).getChildrenFromFields().get(0).getNullCount() != 0) {
                throw new IllegalArgumentException("Map array keys array should have no nulls");
            }
            return;
        }
        if (v instanceof StructVector) {
            for (FieldVector c : ((StructVector) v).getChildrenFromFields()) {
                if (c.getValueCount() < v.getValueCount()) {
                    throw new IllegalArgumentException("Struct child array has length smaller than expected for struct "
                        + "array (" + c.getValueCount() + " < " + v.getValueCount() + ")");
                }
            }
            if (!hasMap(f)) {
                ValueVectorUtility.validateFull(v);
            }
            for (FieldVector c : ((StructVector) v).getChildrenFromFields()) {
                validate(c, nodes, node);
            }
            return;
        }
        if (v instanceof ListVector) {
            ListVector list = (ListVector) v;
            if (list.getValueCount() > 0 && list.getOffsetBuffer().capacity() >= 4L * (list.getValueCount() + 1)
                && list.getOffsetBuffer().getInt(4L * list.getValueCount()) > list.getDataVector().getValueCount()) {
                throw new IllegalArgumentException("Length spanned by list offsets larger than values array");
            }
            if (!hasMap(f)) {
                ValueVectorUtility.validateFull(v);
            }
            validate(((ListVector) v).getDataVector(), nodes, node);
            return;
        }
        ValueVectorUtility.validateFull(v);
        if (v instanceof FieldVector && !((FieldVector) v).getChildrenFromFields().isEmpty()) {
            for (FieldVector c : ((FieldVector) v).getChildrenFromFields()) {
                validate(c, nodes, node);
            }
        }
        if (v instanceof VarCharVector || v instanceof LargeVarCharVector) {
            utf8(v);
        } else if (f.getType() instanceof ArrowType.Time || f.getType() instanceof ArrowType.Date
            && ((ArrowType.Date) f.getType()).getUnit() == org.apache.arrow.vector.types.DateUnit.MILLISECOND) {
            temporal((BaseFixedWidthVector) v, f.getType());
        } else if (v instanceof DecimalVector || v instanceof Decimal256Vector) {
            int precision = ((ArrowType.Decimal) f.getType()).getPrecision();
            BigDecimal bound = BigDecimal.TEN.pow(precision);
            for (int i = 0; i < v.getValueCount(); i++) {
                if (!v.isNull(i)) {
                    BigDecimal d = v instanceof DecimalVector ? ((DecimalVector) v).getObject(i)
                        : ((Decimal256Vector) v).getObject(i);
                    if (new BigDecimal(d.unscaledValue()).abs().compareTo(bound) >= 0) {
                        throw new IllegalArgumentException("Decimal value " + d + " does not fit in precision "
                            + precision);
                    }
                }
            }
        }
    }

    private static boolean hasMap(Field f) {
        if (f.getType() instanceof ArrowType.Map) {
            return true;
        }
        for (Field c : f.getChildren()) {
            if (hasMap(c)) {
                return true;
            }
        }
        return false;
    }

    /**
     * Times of day within the day, date64 values whole days (what Arrow C++'s full validation checks of them).
     */
    private static void temporal(BaseFixedWidthVector v, ArrowType type) {
        long day = 86_400_000L;
        if (type instanceof ArrowType.Time) {
            switch (((ArrowType.Time) type).getUnit()) {
                case SECOND:
                    day = 86_400L;
                    break;
                case MICROSECOND:
                    day = 86_400_000_000L;
                    break;
                case NANOSECOND:
                    day = 86_400_000_000_000L;
                    break;
                default:
                    break;
            }
        }
        ArrowBuf data = v.getDataBuffer();
        boolean wide = v.getTypeWidth() == 8;
        for (int i = 0; i < v.getValueCount(); i++) {
            if (v.isNull(i)) {
                continue;
            }
            long x = wide ? data.getLong(8L * i) : data.getInt(4L * i);
            if (type instanceof ArrowType.Time ? x < 0 || x >= day : x % day != 0) {
                throw new IllegalArgumentException(type + " " + x + (type instanceof ArrowType.Time
                    ? " is not within the acceptable range of [0, " + day + ")" : " does not represent a whole number "
                    + "of days"));
            }
        }
    }

    /** Every non-null string of a (large) string vector is valid UTF-8 (as Arrow C++'s full validation checks). */
    private static void utf8(ValueVector v) {
        ArrowBuf data = v.getDataBuffer();
        ArrowBuf offsets = v.getOffsetBuffer();
        boolean large = v instanceof BaseLargeVariableWidthVector;
        int width = large ? 8 : 4;
        int n = v.getValueCount();
        if (n == 0) {
            return;
        }
        long from = large ? offsets.getLong(0) : offsets.getInt(0);
        long to = large ? offsets.getLong((long) n * width) : offsets.getInt((long) n * width);
        long p0 = from;
        for (; p0 + 8 <= to && (data.getLong(p0) & 0x8080808080808080L) == 0; p0 += 8) {
            // ASCII, eight bytes at a time
        }
        while (p0 < to && data.getByte(p0) >= 0) {
            p0++;
        }
        if (p0 >= to) {
            return;  // every byte ASCII: valid UTF-8, whatever the nulls
        }
        for (int i = 0; i < n; i++) {
            if (v.isNull(i)) {
                continue;
            }
            long start = large ? offsets.getLong((long) i * width) : offsets.getInt((long) i * width);
            long end = large ? offsets.getLong((long) (i + 1) * width) : offsets.getInt((long) (i + 1) * width);
            long p = start;
            while (p < end) {
                int c = data.getByte(p) & 0xff;
                int more;
                int min;
                if (c < 0x80) {
                    p++;
                    continue;
                } else if (c >= 0xc2 && c <= 0xdf) {
                    more = 1;
                    min = 0x80;
                } else if (c >= 0xe0 && c <= 0xef) {
                    more = 2;
                    min = 0x800;
                } else if (c >= 0xf0 && c <= 0xf4) {
                    more = 3;
                    min = 0x10000;
                } else {
                    throw new IllegalArgumentException("Invalid UTF8 sequence in string " + i);
                }
                if (p + more >= end) {  // its continuation bytes run past the string
                    throw new IllegalArgumentException("Invalid UTF8 sequence in string " + i);
                }
                int cp = c & (0x3f >> more);
                for (int k = 1; k <= more; k++) {
                    int cc = data.getByte(p + k) & 0xff;
                    if ((cc & 0xc0) != 0x80) {
                        throw new IllegalArgumentException("Invalid UTF8 sequence in string " + i);
                    }
                    cp = (cp << 6) | (cc & 0x3f);
                }
                if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                    throw new IllegalArgumentException("Invalid UTF8 sequence in string " + i);
                }
                p += 1 + more;
            }
        }
    }

    /** Every row's {@code _time} and {@code _seq} hold the event's time and seq (FORMAT.md §4.1). */
    private void checkLogColumns(PartRead.Msg m, int n) {
        FieldVector tv = root.getVector(nRecords);
        BigIntVector sv = (BigIntVector) root.getVector(nRecords + 1);
        if (tv.getNullCount() != 0 || sv.getNullCount() != 0) {
            throw corrupt("_time or _seq column holds nulls", m);
        }
        for (int i = 0; i < n; i++) {
            if (sv.get(i) != m.seq) {
                throw corrupt("_seq column holds " + sv.get(i) + " in an event of seq " + m.seq, m);
            }
        }
        if (spec.arity == 0) {
            BigIntVector t = (BigIntVector) tv;
            for (int i = 0; i < n; i++) {
                if (t.get(i) != m.time[0]) {
                    throw corrupt("_time column holds " + t.get(i) + " in an event at time " + m.time[0], m);
                }
            }
        } else {
            ListVector lv = (ListVector) tv;
            BigIntVector items = (BigIntVector) lv.getDataVector();
            if (items.getNullCount() != 0) {
                throw corrupt("_time column holds nulls", m);
            }
            for (int i = 0; i < n; i++) {
                int s = lv.getElementStartIndex(i);
                int e = lv.getElementEndIndex(i);
                boolean same = e - s == m.time.length;
                for (int k = 0; same && k < m.time.length; k++) {
                    same = items.get(s + k) == m.time[k];
                }
                if (!same) {
                    throw corrupt("_time column disagrees with the event's time in row " + i, m);
                }
            }
        }
    }

    @Override
    public void close() {
        root.close();
        alloc.close();
    }
}
