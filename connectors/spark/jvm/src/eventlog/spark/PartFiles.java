package eventlog.spark;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.BufferedOutputStream;
import java.nio.channels.FileChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

/**
 * Writes the events of one part into a part folder of the 2.x file layout (FORMAT.md §3.2, §3.4), as
 * {@code connectors/files/writer.py} does: segments {@code _<20 digits>.arrow.open} with their index
 * {@code _<20 digits>.index}, sealed at rotation and at close by writing the footer (fsync'ed first when
 * asked) and renaming them to {@code <20 digits>.arrow}; an empty {@code .lock} file like the writer's lock.
 */
final class PartFiles implements AutoCloseable {
    static final int KIND_MESSAGES = 1;
    static final int KIND_PROGRESS = 2;

    private final Path dir;
    private final byte[] schemaMessage;
    private final long segmentBytes;
    private final boolean fsync;
    private final CRC32 crc = new CRC32();
    private final byte[] entry = new byte[32];

    private long nextSeq = 1;
    private long firstSeq;
    private FileOutputStream dataFile;
    private OutputStream data;
    private FileOutputStream indexFile;
    private OutputStream index;
    private long size;
    private final List<long[]> blocks = new ArrayList<>();

    /** {@code schemaMessage}: the segment's IPC Schema message, writer mark included. */
    PartFiles(Path dir, byte[] schemaMessage, long segmentBytes, boolean fsync) throws IOException {
        this.dir = dir;
        this.schemaMessage = schemaMessage;
        this.segmentBytes = segmentBytes;
        this.fsync = fsync;
        Files.createDirectories(dir);
        Path lock = dir.resolve(".lock");
        if (!Files.exists(lock)) {
            Files.createFile(lock);
        }
    }

    long nextSeq() {
        return nextSeq;
    }

    /** Number the events from {@code seq} on (a part continued by later segments; before any event only). */
    void startAt(long seq) {
        if (data != null || nextSeq != 1 || seq < 1) {
            throw new IllegalStateException("cannot start part " + dir + " at sequence id " + seq);
        }
        nextSeq = seq;
    }

    static String name20(long seq) {
        return String.format("%020d", seq);
    }

    private Path openPath(long first) {
        return dir.resolve("_" + name20(first) + ".arrow.open");
    }

    private Path sealedPath(long first) {
        return dir.resolve(name20(first) + ".arrow");
    }

    private Path indexPath(long first) {
        return dir.resolve("_" + name20(first) + ".index");
    }

    private void openSegment(long first) throws IOException {
        Path path = openPath(first);
        if (Files.exists(sealedPath(first))) {
            throw new FileAlreadyExistsException(sealedPath(first).toString());
        }
        dataFile = new FileOutputStream(Files.createFile(path).toFile());
        data = new BufferedOutputStream(dataFile, 1 << 18);  // under half a G1 region: not a humongous object
        data.write(Footer.LEADING_MAGIC);
        data.write(schemaMessage);
        indexFile = new FileOutputStream(Files.createFile(indexPath(first)).toFile());
        index = new BufferedOutputStream(indexFile, 1 << 16);
        Bytes h = new Bytes(16);
        h.write('E');
        h.write('L');
        h.write('I');
        h.write('X');
        h.int16(1);
        h.int16(0);
        h.int64(first);
        index.write(h.buf, 0, h.len);
        firstSeq = first;
        size = Footer.LEADING_MAGIC.length + schemaMessage.length;
        blocks.clear();
    }

    /** Append one event (a whole IPC record-batch message in {@code msg[0, len)}); returns its seq. */
    long append(byte[] msg, int len, int kind) throws IOException {
        if (data != null && size >= segmentBytes) {
            closeSegment();
        }
        if (data == null) {
            openSegment(nextSeq);
        }
        long seq = nextSeq;
        crc.reset();
        crc.update(msg, 0, len);
        int bodyCrc = (int) crc.getValue();
        data.write(msg, 0, len);
        put64(entry, 0, seq);
        put64(entry, 8, size);
        put32(entry, 16, len);
        put32(entry, 20, bodyCrc);
        entry[24] = (byte) kind;
        entry[25] = entry[26] = entry[27] = 0;
        crc.reset();
        crc.update(entry, 0, 28);
        put32(entry, 28, (int) crc.getValue());
        index.write(entry);
        int meta = 8 + Bytes.int32At(msg, 4);
        blocks.add(new long[] {size, meta, len - meta});
        size += len;
        nextSeq = seq + 1;
        return seq;
    }

    /** Seal the open segment: footer, fsync (when asked), close, rename to its sealed name. */
    void closeSegment() throws IOException {
        if (data == null) {
            return;
        }
        data.write(Footer.build(schemaMessage, blocks));
        data.flush();
        index.flush();
        if (fsync) {
            dataFile.getFD().sync();
            indexFile.getFD().sync();
        }
        data.close();
        index.close();
        data = null;
        index = null;
        Files.move(openPath(firstSeq), sealedPath(firstSeq), StandardCopyOption.ATOMIC_MOVE);
        if (fsync) {
            syncDir(dir);
        }
    }

    @Override
    public void close() throws IOException {
        closeSegment();
    }

    /** Close the files without sealing (the staged part is being discarded). */
    void abandon() {
        for (OutputStream s : new OutputStream[] {data, index}) {
            if (s != null) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // discarding anyway
                }
            }
        }
        data = null;
        index = null;
    }

    static void syncDir(Path dir) throws IOException {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        }
    }

    private static void put64(byte[] b, int at, long v) {
        put32(b, at, (int) v);
        put32(b, at + 4, (int) (v >>> 32));
    }

    private static void put32(byte[] b, int at, int v) {
        b[at] = (byte) v;
        b[at + 1] = (byte) (v >>> 8);
        b[at + 2] = (byte) (v >>> 16);
        b[at + 3] = (byte) (v >>> 24);
    }
}
