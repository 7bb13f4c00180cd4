package eventlog.spark;

/**
 * A damaged or inconsistent file log found by the JVM reader (the Python reader's {@code CorruptLogError},
 * {@code LogLimitError}, {@code UnsupportedVersionError}, {@code SequenceError} or {@code ProgressError}): the
 * message starts with that name and names the stream, part, sequence id, byte offset and file. No row of the
 * damaged event is ever returned.
 */
public final class CorruptLogException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    /** The sequence id of the event found damaged (0 when none: a segment's prefix, its index header, its footer). */
    final long seq;

    CorruptLogException(String kind, String message, String stream, int part, long seq, long offset, String path) {
        super(kind + ": " + message + " (stream " + stream + ", part " + part
            + (seq > 0 ? ", seq " + seq : "") + (offset >= 0 ? ", offset " + offset : "")
            + (path != null ? ", file " + path : "") + ")");
        this.seq = Math.max(seq, 0);
    }
}
