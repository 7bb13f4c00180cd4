package eventlog.spark;

import java.io.OutputStream;
import java.util.Arrays;

/** A growable byte buffer whose contents are read in place (no copy per event). */
final class Bytes extends OutputStream {
    byte[] buf;
    int len;

    Bytes(int capacity) {
        buf = new byte[Math.max(capacity, 64)];
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
