package eventlog.spark;

import java.io.Serializable;

/**
 * What the tasks of a JVM batch read need (built by {@code connectors/spark/jvm/read.py}, sent to executors):
 * the stream's folder, its peers, the replay workers (one Spark partition each; assign mode: worker {@code j}
 * reads the parts {@code i % workers == j}), the segment schema message the stream's segments must have,
 * the time arity (0: int64) and the merged frontier the planner fixed (null: incomplete times too).
 */
public final class ReadSpec implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The stream's folder (local), or its key prefix in {@link #store}'s bucket. */
    final String streamDir;
    /** The object store the log lives on, or null for a local file log. */
    final ObjectStore store;
    final String stream;
    final int peers;
    final int workers;
    final byte[] schemaMessage;
    final int arity;
    final long[][] frontier;

    /** {@code store}: null for a local file log, else the store's settings as {@link ObjectStore#of} takes them. */
    public ReadSpec(String streamDir, String stream, int peers, int workers, byte[] schemaMessage, int arity,
                    String frontier, boolean incomplete, String[] store) {
        this.store = ObjectStore.of(store);
        this.streamDir = streamDir;
        this.stream = stream;
        this.peers = peers;
        this.workers = workers;
        this.schemaMessage = schemaMessage;
        this.arity = arity;
        this.frontier = incomplete ? null : parseFrontier(frontier);
    }

    /** {@code "1,2;3,4"}: times separated by {@code ;}, components by {@code ,} ("" is the empty frontier). */
    private static long[][] parseFrontier(String text) {
        if (text.isEmpty()) {
            return new long[0][];
        }
        String[] times = text.split(";");
        long[][] out = new long[times.length][];
        for (int i = 0; i < times.length; i++) {
            String[] parts = times[i].split(",");
            out[i] = new long[parts.length];
            for (int k = 0; k < parts.length; k++) {
                out[i][k] = Long.parseLong(parts[k]);
            }
        }
        return out;
    }
}
