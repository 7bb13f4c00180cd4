package eventlog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.MapVector;
import org.apache.arrow.vector.complex.StructVector;
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
 * The rows of one replay worker: for each of its parts ({@link PartRead}), the released Messages events at
 * times the planned frontier completed, decoded one at a time (zstd buffers, every batch validated, its
 * {@code _time} and {@code _seq} columns checked against the event's time and seq), as rows of the stream's
 * columns followed by {@code _time}, {@code _part}, {@code _seq} — the Python reader's columns. Each event's
 * vectors are reused for the next one, so a task holds one decoded event at a time.
 */
final class PartBatches implements Iterator<InternalRow>, AutoCloseable {
    static final int MAX_EVENT_RECORDS = 1 << 20;

    private final ReadSpec spec;
    private final Iterator<Integer> parts;
    private final BufferAllocator alloc;
    private final VectorSchemaRoot root;
    private final VectorLoader loader;
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
        this.loader = new VectorLoader(root, CommonsCompressionFactory.INSTANCE);
        this.nRecords = schema.getFields().size() - 2;
    }

    @Override
    public boolean hasNext() {
        while (!rows.hasNext()) {
            try {
                while (!msgs.hasNext()) {
                    if (!parts.hasNext()) {
                        return false;
                    }
                    current = new PartRead(spec, parts.next()).read();
                    List<PartRead.Msg> keep = new ArrayList<>();
                    for (PartRead.Msg m : current.released) {
                        if (complete(m.time)) {
                            keep.add(m);
                        }
                    }
                    msgs = keep.iterator();
                }
                rows = decode(msgs.next());
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

    private Iterator<InternalRow> decode(PartRead.Msg m) throws IOException {
        ByteBuffer b = current.maps.get(m.segment);
        int at = (int) m.offset;
        int metaLen = b.getInt(at + 4);
        ByteBuffer meta = b.duplicate().position(at + 8).limit(at + 8 + metaLen).slice().order(ByteOrder.LITTLE_ENDIAN);
        int rowsN;
        try {
            Message msg = Message.getRootAsMessage(meta);
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
                if (batch.getLength() < 1 || batch.getLength() > MAX_EVENT_RECORDS) {
                    throw new IllegalArgumentException("Messages event of " + batch.getLength() + " records");
                }
                loader.load(batch);
            }
            for (FieldVector v : root.getFieldVectors()) {
                validate(v);
            }
            rowsN = root.getRowCount();
        } catch (CorruptLogException e) {
            throw e;
        } catch (RuntimeException | IOException e) {
            throw corrupt("undecodable event: " + e, m);
        }
        checkLogColumns(m, rowsN);
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
     * {@code ValueVectorUtility.validateFull} (offsets, lengths, buffer sizes) of a vector; map vectors (which
     * Arrow Java 19's validator refuses as a type mismatch) get their offsets checked here and their entries
     * validated.
     */
    private static void validate(ValueVector v) {
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
            validate(entries);
        } else if (v instanceof StructVector && hasMap(v.getField())) {
            // (the container itself: its type check refuses maps; its children are checked below)
            for (FieldVector c : ((StructVector) v).getChildrenFromFields()) {
                validate(c);
            }
        } else if (v instanceof ListVector && hasMap(v.getField())) {
            // (the container itself: its type check refuses maps; its children are checked below)
            validate(((ListVector) v).getDataVector());
        } else {
            ValueVectorUtility.validateFull(v);
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
