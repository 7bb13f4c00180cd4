package eventlog.spark;

import java.io.OutputStream;
import java.util.Arrays;
import java.util.concurrent.ConcurrentLinkedDeque;

/** A growable byte buffer whose contents are read in place (no copy per event). */
final class Bytes extends OutputStream {
    /** Arrays of {@link #recycle}d buffers, for the next {@link #pooled} ones. */
    private static final ConcurrentLinkedDeque<byte[]> POOL = new ConcurrentLinkedDeque<>();
    /** Arrays kept in {@link #POOL} at most, and the largest kept. */
    private static final int POOL_ARRAYS = 8;
    private static final int POOL_BYTES = 8 << 20;

    byte[] buf;
    int len;

    Bytes(int capacity) {
        buf = new byte[Math.max(capacity, 64)];
    }

    private Bytes(byte[] buf) {
        this.buf = buf;
    }

    /**
     * A buffer of at least {@code capacity} bytes, its array one a {@link #recycle}d buffer held when there is
     * one. An event's buffer grows to the event's size, which the JVM allocates as a humongous object (over
     * half a G1 region) that starts a concurrent marking of the whole heap: each task that captures a
     * partition takes the array the last one left instead.
     */
    static Bytes pooled(int capacity) {
        byte[] b = POOL.pollFirst();
        return b != null && b.length >= capacity ? new Bytes(b) : new Bytes(capacity);
    }

    /** Give this buffer's array to the pool (unless it is full or the array is over 8 MiB); this one is empty. */
    void recycle() {
        byte[] b = buf;
        buf = new byte[64];
        len = 0;
        if (b.length <= POOL_BYTES && POOL.size() < POOL_ARRAYS) {
            POOL.addFirst(b);
        }
    }

    void reset() {
        len = 0;
    }

    private void ensure(int more) {
        long need = (long) len + more;
        if (need > Integer.MAX_VALUE - 16) {
            throw new IllegalStateException("event of more than 2 GiB");
        }
        if (need > buf.length) {
            buf = Arrays.copyOf(buf, (int) Math.min(Integer.MAX_VALUE - 16, Math.max(need, 2L * buf.length)));
        }
    }

    @Override
    public void write(int b) {
        ensure(1);
        buf[len++] = (byte) b;
    }

    @Override
    public void write(byte[] b, int off, int n) {
        ensure(n);
        System.arraycopy(b, off, buf, len, n);
        len += n;
    }

    void zeros(int n) {
        ensure(n);
        Arrays.fill(buf, len, len + n, (byte) 0);
        len += n;
    }

    void int32(int v) {
        ensure(4);
        buf[len++] = (byte) v;
        buf[len++] = (byte) (v >>> 8);
        buf[len++] = (byte) (v >>> 16);
        buf[len++] = (byte) (v >>> 24);
    }

    void int16(int v) {
        ensure(2);
        buf[len++] = (byte) v;
        buf[len++] = (byte) (v >>> 8);
    }

    void int64(long v) {
        int32((int) v);
        int32((int) (v >>> 32));
    }

    void setInt32(int at, int v) {
        buf[at] = (byte) v;
        buf[at + 1] = (byte) (v >>> 8);
        buf[at + 2] = (byte) (v >>> 16);
        buf[at + 3] = (byte) (v >>> 24);
    }

    byte[] toArray() {
        return Arrays.copyOf(buf, len);
    }

    static int int32At(byte[] b, int at) {
        return (b[at] & 0xff) | (b[at + 1] & 0xff) << 8 | (b[at + 2] & 0xff) << 16 | (b[at + 3] & 0xff) << 24;
    }

    static int uint16At(byte[] b, int at) {
        return (b[at] & 0xff) | (b[at + 1] & 0xff) << 8;
    }
}
