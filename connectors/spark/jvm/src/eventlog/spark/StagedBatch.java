package eventlog.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.InvalidClassException;
import java.io.ObjectInputFilter;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The description of a staged micro-batch of capture by configuration ({@code _spec} in its staging folder): the
 * tap its tasks ran and how many partitions it had, written when the batch is planned and read back when the
 * driver appends it, perhaps after a restart. Reading builds a {@link TapSpec} and the strings and arrays of its
 * fields and nothing else, from a bounded file: the file lies in the log's folder, and Java deserialization of
 * other classes runs their code, as unpickling does.
 */
public final class StagedBatch {
    /** The largest description read back (a schema message and a stream header: a few KiB in practice). */
    static final long MAX_BYTES = 16L << 20;

    /** The tap the batch's tasks ran. */
    public final TapSpec spec;
    /** The batch's partitions of the captured operator. */
    public final int partitions;

    private StagedBatch(TapSpec spec, int partitions) {
        this.spec = spec;
        this.partitions = partitions;
    }

    /** Write the description of a batch whose tasks run {@code spec} over {@code partitions} partitions. */
    public static void write(Path file, TapSpec spec, int partitions) throws IOException {
        Files.write(file, bytes(spec, partitions));
    }

    /** The description of a batch whose tasks run {@code spec} over {@code partitions} partitions, as bytes (the
     * {@code _spec} object of a log on an object store). */
    static byte[] bytes(TapSpec spec, int partitions) throws IOException {
        java.io.ByteArrayOutputStream f = new java.io.ByteArrayOutputStream();
        try (ObjectOutputStream o = new ObjectOutputStream(f)) {
            o.writeObject(spec.store == null ? spec : spec.on(null));  // no credentials in the log
            o.writeInt(partitions);
        }
        return f.toByteArray();
    }

    /** The description in {@code file}; an IOException naming the file when it is anything else. */
    public static StagedBatch read(Path file) throws IOException {
        long size = Files.size(file);
        if (size > MAX_BYTES) {
            throw new IOException(file + " has " + size + " bytes, more than a staged batch's description holds ("
                + MAX_BYTES + ")");
        }
        try (InputStream f = Files.newInputStream(file)) {
            return read(f, file.toString());
        }
    }

    /** The description in {@code data} (read from {@code where}, named in errors): as {@link #read(Path)}. */
    static StagedBatch read(byte[] data, String where) throws IOException {
        if (data.length > MAX_BYTES) {
            throw new IOException(where + " has " + data.length + " bytes, more than a staged batch's description "
                + "holds (" + MAX_BYTES + ")");
        }
        return read(new java.io.ByteArrayInputStream(data), where);
    }

    private static StagedBatch read(InputStream f, String where) throws IOException {
        try (ObjectInputStream in = new ObjectInputStream(f)) {
            in.setObjectInputFilter(StagedBatch::specOnly);
            Object spec = in.readObject();
            if (!(spec instanceof TapSpec)) {
                throw new IOException(where + " is not a staged batch's description (it holds a "
                    + (spec == null ? "null" : spec.getClass().getName()) + ")");
            }
            return new StagedBatch((TapSpec) spec, in.readInt());
        } catch (InvalidClassException | ClassNotFoundException e) {
            throw new IOException(where + " is not a staged batch's description: " + e.getMessage());
        } catch (java.io.StreamCorruptedException | java.io.EOFException e) {
            throw new IOException(where + " is not a staged batch's description: " + e);
        }
    }

    private static ObjectInputFilter.Status specOnly(ObjectInputFilter.FilterInfo info) {
        if (info.depth() > 3 || info.references() > 64 || info.streamBytes() > MAX_BYTES
                || info.arrayLength() > MAX_BYTES) {
            return ObjectInputFilter.Status.REJECTED;
        }
        Class<?> c = info.serialClass();
        if (c == null || c == TapSpec.class || c == String.class || c == byte[].class || c == long[].class) {
            return ObjectInputFilter.Status.ALLOWED;
        }
        return ObjectInputFilter.Status.REJECTED;
    }
}
