package eventlog.spark;

import java.util.List;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.arrow.ArrowFieldWriter;
import org.apache.spark.sql.execution.arrow.ArrowWriter$;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Rows into the vectors of a {@link VectorSchemaRoot}, as Spark's {@code ArrowWriter} does, for one schema:
 * the flat columns (booleans, integers, floats, dates, timestamps, strings, binaries) are written by one type
 * switch straight into the vectors' memory, their capacity checked once a row, where Spark's writer makes a
 * virtual call and a bounds-checked {@code setSafe} a value; every other column (decimals, nested types) is
 * written by Spark's own field writer. The vectors hold exactly what Spark's writer would put there.
 */
final class RowWriter {
    private static final int BOOL = 0;
    private static final int BYTE = 1;
    private static final int SHORT = 2;
    private static final int INT = 3;
    private static final int LONG = 4;
    private static final int FLOAT = 5;
    private static final int DOUBLE = 6;
    private static final int STRING = 7;
    private static final int BINARY = 8;
    private static final int OTHER = 9;
    /** Values of at most this many bytes are copied byte by byte. */
    private static final int SMALL = 16;

    private final VectorSchemaRoot root;
    private final FieldVector[] vectors;
    private final int[] kinds;
    /** Spark's field writer of each column written by it (kind OTHER), else null. */
    private final ArrowFieldWriter[] others;
    /** Per column: the validity buffer's address, the value (data) buffer's, the offset buffer's (0 if none). */
    private final long[] validity;
    private final long[] values;
    private final long[] offsets;
    /** Per variable-width column: the data buffer's capacity in bytes, and the bytes used. */
    private final long[] dataCapacity;
    private final int[] dataEnd;
    /** Rows every flat column has room for. */
    private int capacity;
    private int count;

    RowWriter(VectorSchemaRoot root) {
        this.root = root;
        List<FieldVector> vs = root.getFieldVectors();
        int n = vs.size();
        vectors = vs.toArray(new FieldVector[0]);
        kinds = new int[n];
        others = new ArrowFieldWriter[n];
        validity = new long[n];
        values = new long[n];
        offsets = new long[n];
        dataCapacity = new long[n];
        dataEnd = new int[n];
        for (int i = 0; i < n; i++) {
            kinds[i] = kind(vectors[i]);
            if (kinds[i] == OTHER) {
                others[i] = ArrowWriter$.MODULE$.createFieldWriter(vectors[i]);
            }
        }
        for (FieldVector v : vectors) {
            v.allocateNew();
        }
        refresh();
    }

    /** The column kind written here for a vector of this class, or OTHER (Spark's writer). */
    private static int kind(FieldVector v) {
        if (v instanceof BitVector) {
            return BOOL;
        } else if (v instanceof TinyIntVector) {
            return BYTE;
        } else if (v instanceof SmallIntVector) {
            return SHORT;
        } else if (v instanceof IntVector || v instanceof DateDayVector) {
            return INT;
        } else if (v instanceof BigIntVector || v instanceof TimeStampMicroTZVector
                   || v instanceof TimeStampMicroVector) {
            return LONG;
        } else if (v instanceof Float4Vector) {
            return FLOAT;
        } else if (v instanceof Float8Vector) {
            return DOUBLE;
        } else if (v instanceof VarCharVector) {
            return STRING;
        } else if (v instanceof VarBinaryVector) {
            return BINARY;
        }
        return OTHER;
    }

    /** Re-read the buffers' addresses and capacities (after an allocation moved them). */
    private void refresh() {
        int cap = Integer.MAX_VALUE;
        for (int i = 0; i < vectors.length; i++) {
            switch (kinds[i]) {
                case OTHER:
                    continue;
                case STRING:
                case BINARY: {
                    BaseVariableWidthVector v = (BaseVariableWidthVector) vectors[i];
                    validity[i] = v.getValidityBufferAddress();
                    offsets[i] = v.getOffsetBufferAddress();
                    values[i] = v.getDataBufferAddress();
                    dataCapacity[i] = v.getDataBuffer().capacity();
                    cap = Math.min(cap, v.getValueCapacity());
                    break;
                }
                default: {
                    BaseFixedWidthVector v = (BaseFixedWidthVector) vectors[i];
                    validity[i] = v.getValidityBufferAddress();
                    values[i] = v.getDataBufferAddress();
                    cap = Math.min(cap, v.getValueCapacity());
                }
            }
        }
        capacity = cap;
    }

    /** Make room for one more row in every flat column. */
    private void grow() {
        for (int i = 0; i < vectors.length; i++) {
            if (kinds[i] == STRING || kinds[i] == BINARY) {
                ((BaseVariableWidthVector) vectors[i]).reallocValidityAndOffsetBuffers();
            } else if (kinds[i] != OTHER) {
                ((BaseFixedWidthVector) vectors[i]).reAlloc();
            }
        }
        refresh();
    }

    private static void valid(long bits, int row, boolean isValid) {
        long a = bits + (row >> 3);
        byte b = MemoryUtil.getByte(a);
        int mask = 1 << (row & 7);
        MemoryUtil.putByte(a, (byte) (isValid ? b | mask : b & ~mask));
    }

    /** Append {@code row}. */
    void write(InternalRow row) {
        int r = count;
        if (r >= capacity) {
            grow();
        }
        UnsafeRow unsafe = row instanceof UnsafeRow ? (UnsafeRow) row : null;
        for (int i = 0; i < kinds.length; i++) {
            int kind = kinds[i];
            if (kind == OTHER) {
                others[i].write(row, i);
                continue;
            }
            boolean isNull = row.isNullAt(i);
            valid(validity[i], r, !isNull);
            long at = values[i];
            switch (kind) {
                case BOOL:
                    valid(at, r, !isNull && row.getBoolean(i));
                    break;
                case BYTE:
                    MemoryUtil.putByte(at + r, isNull ? 0 : row.getByte(i));
                    break;
                case SHORT:
                    MemoryUtil.putShort(at + 2L * r, isNull ? 0 : row.getShort(i));
                    break;
                case INT:
                    MemoryUtil.putInt(at + 4L * r, isNull ? 0 : row.getInt(i));
                    break;
                case LONG:
                    MemoryUtil.putLong(at + 8L * r, isNull ? 0 : row.getLong(i));
                    break;
                case FLOAT:
                    MemoryUtil.putInt(at + 4L * r, isNull ? 0 : Float.floatToRawIntBits(row.getFloat(i)));
                    break;
                case DOUBLE:
                    MemoryUtil.putLong(at + 8L * r, isNull ? 0 : Double.doubleToRawLongBits(row.getDouble(i)));
                    break;
                default:
                    writeBytes(i, r, isNull ? null : row, unsafe);
            }
        }
        count = r + 1;
    }

    /** A string or binary value ({@code row} null: a null value) at row {@code r} of column {@code i}. */
    private void writeBytes(int i, int r, InternalRow row, UnsafeRow unsafe) {
        int start = dataEnd[i];
        Object base = null;
        long from = 0;
        int len = 0;
        if (row != null) {
            if (unsafe != null) {  // the bytes where the row keeps them: no object made, nothing copied twice
                long offsetAndSize = unsafe.getLong(i);
                base = unsafe.getBaseObject();
                from = unsafe.getBaseOffset() + (int) (offsetAndSize >> 32);
                len = (int) offsetAndSize;
            } else if (kinds[i] == STRING) {
                UTF8String s = row.getUTF8String(i);
                base = s.getBaseObject();
                from = s.getBaseOffset();
                len = s.numBytes();
            } else {
                byte[] b = row.getBinary(i);
                base = b;
                from = Platform.BYTE_ARRAY_OFFSET;
                len = b.length;
            }
        }
        long end = (long) start + len;
        if (end > Integer.MAX_VALUE) {
            throw new IllegalStateException("column " + vectors[i].getName() + ": over 2 GiB of values in one batch");
        }
        if (end > dataCapacity[i]) {
            BaseVariableWidthVector v = (BaseVariableWidthVector) vectors[i];
            v.reallocDataBuffer(Math.max(end, 2 * dataCapacity[i]));
            values[i] = v.getDataBufferAddress();
            dataCapacity[i] = v.getDataBuffer().capacity();
        }
        long to = values[i] + start;
        if (len <= SMALL) {  // a short value: a call into Unsafe.copyMemory costs more than the bytes
            for (int k = 0; k < len; k++) {
                MemoryUtil.putByte(to + k, Platform.getByte(base, from + k));
            }
        } else {
            Platform.copyMemory(base, from, null, to, len);
        }
        dataEnd[i] = (int) end;
        MemoryUtil.putInt(offsets[i] + 4L * (r + 1), (int) end);
    }

    /** Rows written since the last {@link #reset}. */
    int count() {
        return count;
    }

    /** About the bytes the rows written take in the vectors (Spark's {@code ArrowWriter.sizeInBytes}). */
    long sizeInBytes() {
        long size = 0;
        for (int i = 0; i < kinds.length; i++) {
            switch (kinds[i]) {
                case OTHER:
                    size += others[i].getSizeInBytes();
                    break;
                case BOOL:
                    size += 2L * ((count + 7) >> 3);
                    break;
                case BYTE:
                    size += count + ((count + 7) >> 3);
                    break;
                case SHORT:
                    size += 2L * count + ((count + 7) >> 3);
                    break;
                case INT:
                case FLOAT:
                    size += 4L * count + ((count + 7) >> 3);
                    break;
                case STRING:
                case BINARY:
                    size += 4L * (count + 1) + dataEnd[i] + ((count + 7) >> 3);
                    break;
                default:
                    size += 8L * count + ((count + 7) >> 3);
            }
        }
        return size;
    }

    /**
     * Set every vector's value count and the root's row count to the rows written. The bits after the last row
     * in the last byte of a bitmap are cleared: {@link #reset} leaves the previous rows' bits, which every row
     * written since has replaced, but not those.
     */
    void finish() {
        for (int i = 0; i < kinds.length; i++) {
            if (kinds[i] == OTHER) {
                others[i].finish();
            } else {
                clearTail(validity[i], count);
                if (kinds[i] == BOOL) {
                    clearTail(values[i], count);
                }
                if (kinds[i] == STRING || kinds[i] == BINARY) {
                    ((BaseVariableWidthVector) vectors[i]).setLastSet(count - 1);
                }
                vectors[i].setValueCount(count);
            }
        }
        root.setRowCount(count);
    }

    /** The bits of a bitmap after its first {@code n} in their byte, cleared. */
    private static void clearTail(long bits, int n) {
        if ((n & 7) != 0) {
            long a = bits + (n >> 3);
            MemoryUtil.putByte(a, (byte) (MemoryUtil.getByte(a) & ((1 << (n & 7)) - 1)));
        }
    }

    /**
     * Empty the vectors (their memory kept) for the next rows. The flat columns' memory is not zeroed, as
     * Arrow's {@code reset} does (a memset of every buffer's whole capacity each event): {@link #write} sets
     * every validity bit, value and offset of a row, and the first offset stays 0.
     */
    void reset() {
        for (int i = 0; i < kinds.length; i++) {
            if (kinds[i] == OTHER) {
                others[i].reset();
            } else {
                vectors[i].setValueCount(0);
                dataEnd[i] = 0;
            }
        }
        count = 0;
        refresh();
    }
}
