package eventlog.spark;

import java.io.Serializable;

/**
 * What every task of one JVM tap needs to capture its partition (built on the driver by the Python side,
 * shipped with the task): where the log is, the stream, the segment schema, the time, the sizes.
 */
public final class TapSpec implements Serializable, Cloneable {
    private static final long serialVersionUID = 1L;

    /** Root folder of a local file log; on an object store, the key prefix of the log's root (no slashes around). */
    final String root;
    /** The object store the log lives on (its bucket holds {@link #root}), or null for a local file log. Set by the
     * constructor, and in a copy by {@link #on} only. */
    ObjectStore store;
    /** The stream's name. */
    final String stream;
    /** This tap's id: the staging folder of its attempts is {@code <root>/.staging/<stream>/<job>}. */
    final String job;
    /** Parts of the stream (the tapped RDD's partition count). */
    final int peers;
    /**
     * The Arrow IPC Schema message of the segment schema (the stream schema, then {@code _time} and
     * {@code _seq}; FORMAT.md §4.1) without the writer mark, as pyarrow serialized it.
     */
    final byte[] schemaMessage;
    /** The {@code _header.json} of the one-part staging stream each attempt writes into. */
    final byte[] stagedHeader;
    /** Index of the time column in the rows, or -1 for a literal time. */
    final int timeColumn;
    /** 0 for int64 times, K for product:K. */
    final int arity;
    /** The literal time's components (one for int64 times); empty with a time column. */
    final long[] literal;
    /** A segment is sealed and the next one started once it reached this many bytes. */
    final long segmentBytes;
    /** Records of one Messages event at most (fewer when {@link #eventBytes} is reached first). */
    final int eventRows;
    /** Buffered Arrow bytes of one time at which its records become an event. */
    final long eventBytes;
    /** Whether segments and indexes are fsync'ed before they are sealed and published. */
    final boolean fsync;
    /** Whether Messages events' buffers are zstd-compressed (the stream's compression {@code zstd}) or stored as
     * they are ({@code none}); FORMAT.md §13. */
    final boolean compress;
    /**
     * A micro-batch of capture by configuration ({@link CaptureStreaming}): the sequence id each part's events
     * start at (the part's next one in the stream), or null for every other tap. With it, a part's Progress
     * event moves its frontier from {@link #since} to the batch's time + 1, and an attempt that reads its whole
     * partition claims it in the batch's staging folder ({@link PartCapture#partDir}) for the driver to append.
     */
    long[] startSeqs;
    /** With {@link #startSeqs}: the parts' frontier before the micro-batch. */
    long since;

    /** A copy of this spec on {@code store} (null: none), as a staged micro-batch's description is written (no
     * credentials in the log) and read back ({@link StagedBatch}): every field copied, whatever fields there are. */
    TapSpec on(ObjectStore store) {
        TapSpec copy;
        try {
            copy = (TapSpec) clone();
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);  // Cloneable
        }
        copy.store = store;
        copy.startSeqs = startSeqs == null ? null : startSeqs.clone();  // the one array a tap changes
        return copy;
    }

    /** As the constructor below, for a stream compressed with zstd (the default). */
    public TapSpec(String root, String stream, String job, int peers, byte[] schemaMessage, byte[] stagedHeader,
                   int timeColumn, int arity, String literal, long segmentBytes, int eventRows, long eventBytes,
                   boolean fsync, String[] store) {
        this(root, stream, job, peers, schemaMessage, stagedHeader, timeColumn, arity, literal, segmentBytes,
             eventRows, eventBytes, fsync, store, "zstd");
    }

    /**
     * {@code store}: null for a local file log; for a log on an S3-protocol store, its settings as
     * {@link ObjectStore#of} takes them, with {@code root} the log's key prefix in the bucket. {@code compression}:
     * the stream's Arrow compression, {@code zstd} or {@code none}.
     */
    public TapSpec(String root, String stream, String job, int peers, byte[] schemaMessage, byte[] stagedHeader,
                   int timeColumn, int arity, String literal, long segmentBytes, int eventRows, long eventBytes,
                   boolean fsync, String[] store, String compression) {
        if (!"zstd".equals(compression) && !"none".equals(compression)) {
            throw new IllegalArgumentException("the JVM tap compresses with zstd or none, not " + compression);
        }
        this.compress = "zstd".equals(compression);
        this.root = root;
        this.store = ObjectStore.of(store);
        this.stream = stream;
        this.job = job;
        this.peers = peers;
        this.schemaMessage = schemaMessage.clone();
        this.stagedHeader = stagedHeader.clone();
        this.timeColumn = timeColumn;
        this.arity = arity;
        if (literal == null || literal.isEmpty()) {
            this.literal = new long[0];
        } else {
            String[] parts = literal.split(",");
            this.literal = new long[parts.length];
            for (int i = 0; i < parts.length; i++) {
                this.literal[i] = Long.parseLong(parts[i].trim());
            }
        }
        if (timeColumn < 0 && this.literal.length != Math.max(arity, 1)) {
            throw new IllegalArgumentException("literal time " + literal + " does not have arity " + arity);
        }
        this.segmentBytes = segmentBytes;
        this.eventRows = eventRows;
        this.eventBytes = eventBytes;
        this.fsync = fsync;
    }
}
