package eventlog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.commons.compress.compressors.lz4.FramedLZ4CompressorInputStream;

/**
 * LZ4 frames (Arrow IPC's {@code LZ4_FRAME} body compression, FORMAT.md §13) decompressed into exactly the size
 * their buffer declares, which the reader bounded before: never more is read from a frame than that (plus one byte
 * to find a frame that holds more), whatever blocks or content size the frame declares. The frame format's block
 * modes (independent or linked), sizes and checksums are read by commons-compress, which Spark ships.
 */
final class Lz4Frames {
    private static final int CHUNK = 1 << 16;

    private Lz4Frames() {
    }

    /**
     * Decompress the frame at {@code src[at, at + length)} into {@code dst} ({@code declared} bytes; null with 0):
     * IllegalArgumentException when it is not one LZ4 frame holding exactly {@code declared} bytes.
     */
    static void decompress(ArrowBuf src, long at, long length, ArrowBuf dst, long declared) {
        if (length > Integer.MAX_VALUE - 16) {
            throw new IllegalArgumentException("LZ4 frame of " + length + " bytes");
        }
        byte[] in = new byte[(int) length];
        src.getBytes(at, in, 0, in.length);
        byte[] chunk = new byte[(int) Math.min(CHUNK, Math.max(declared, 1))];
        long got = 0;
        try (InputStream frame = new FramedLZ4CompressorInputStream(new ByteArrayInputStream(in), false)) {
            while (got < declared) {
                int n = frame.read(chunk, 0, (int) Math.min(chunk.length, declared - got));
                if (n < 0) {
                    break;
                }
                dst.setBytes(got, chunk, 0, n);
                got += n;
            }
            if (got != declared || frame.read() >= 0) {
                throw new IllegalArgumentException("LZ4 decompression failed: the frame holds "
                    + (got != declared ? got + " bytes" : "more bytes") + " where " + declared + " were declared");
            }
        } catch (IOException e) {
            throw new IllegalArgumentException("LZ4 decompression failed: " + e.getMessage(), e);
        }
    }
}
