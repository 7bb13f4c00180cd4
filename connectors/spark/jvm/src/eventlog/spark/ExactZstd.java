package eventlog.spark;

import com.github.luben.zstd.Zstd;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BufferLayout;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.compression.AbstractCompressionCodec;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.types.pojo.Field;

/**
 * Decompressing a record batch's buffers (zstd frames, or LZ4 frames: FORMAT.md §13) as Arrow C++ (pyarrow) does (its {@code ipc/reader.cc}), where Arrow
 * Java differs: a buffer is decompressed to exactly the length it declares, 0 included (Arrow Java returns an
 * empty buffer for a declared length of 0 without looking at the frame); the validity bitmap of a field node
 * without nulls is never read (Arrow Java decompresses it, then ignores it); and a field node that declares
 * every slot null must have a bitmap with no bit set (Arrow Java ignores its bitmap, C++ validates it).
 * {@link #prepare} is called with each batch before {@code VectorLoader.load}.
 */
final class ExactZstd extends AbstractCompressionCodec implements CompressionCodec.Factory {
    /** Buffers not to read: validity bitmaps of nodes without nulls. */
    private final Map<ArrowBuf, Boolean> skip = new IdentityHashMap<>();
    /** Validity bitmaps of nodes all null, with the node's length. */
    private final Map<ArrowBuf, Long> allNull = new IdentityHashMap<>();
    /** Whether the batch being loaded holds LZ4 frames (else zstd frames). */
    private boolean lz4;

    /** Note the bitmaps of {@code batch} (whose fields are {@code fields}) to skip or to check. */
    void prepare(ArrowRecordBatch batch, List<Field> fields) {
        skip.clear();
        allNull.clear();
        lz4 = batch.getBodyCompression().getCodec() == CompressionUtil.CodecType.LZ4_FRAME.getType();
        int[] at = {0, 0};
        for (Field f : fields) {
            note(f, batch.getNodes(), batch.getBuffers(), at);
        }
        if (batch.getBodyCompression().getCodec() != NoCompressionCodec.COMPRESSION_TYPE) {
            return;  // checked as they are decompressed
        }
        for (Map.Entry<ArrowBuf, Long> e : allNull.entrySet()) {  // uncompressed: checked as they are
            checkAllNull(e.getKey(), e.getValue());
        }
    }

    private void note(Field f, List<ArrowFieldNode> nodes, List<ArrowBuf> buffers, int[] at) {
        if (at[0] >= nodes.size()) {
            return;  // too few nodes: the loader says so
        }
        ArrowFieldNode node = nodes.get(at[0]++);
        List<BufferLayout.BufferType> types = TypeLayout.getTypeLayout(f.getType()).getBufferTypes();
        for (int k = 0; k < types.size() && at[1] < buffers.size(); k++) {
            ArrowBuf buf = buffers.get(at[1]++);
            if (types.get(k) == BufferLayout.BufferType.VALIDITY && buf.writerIndex() > 0) {
                if (node.getNullCount() == 0) {
                    skip.put(buf, Boolean.TRUE);
                } else if (node.getNullCount() == node.getLength()) {
                    allNull.put(buf, (long) node.getLength());
                }
            }
        }
        for (Field c : f.getChildren()) {
            note(c, nodes, buffers, at);
        }
    }

    private static void checkAllNull(ArrowBuf bitmap, long length) {
        if (bitmap.writerIndex() < (length + 7) / 8) {
            throw new IllegalArgumentException("Buffer #0 too small in an array of length " + length);
        }
        for (long i = 0; i < length; i++) {
            if ((bitmap.getByte(i >> 3) & (1 << (i & 7))) != 0) {
                throw new IllegalArgumentException("null_count value (" + length + ") doesn't match actual number of "
                    + "nulls in array");
            }
        }
    }

    @Override
    public CompressionCodec createCodec(CompressionUtil.CodecType codecType) {
        if (codecType != CompressionUtil.CodecType.ZSTD && codecType != CompressionUtil.CodecType.LZ4_FRAME) {
            throw new IllegalArgumentException("IPC body compression " + codecType + " is neither zstd nor lz4");
        }
        return this;
    }

    @Override
    public CompressionCodec createCodec(CompressionUtil.CodecType codecType, int compressionLevel) {
        return createCodec(codecType);
    }

    @Override
    public ArrowBuf decompress(BufferAllocator allocator, ArrowBuf compressed) {
        if (skip.containsKey(compressed)) {
            compressed.close();
            return allocator.getEmpty();
        }
        if (compressed.writerIndex() >= CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH
            && readUncompressedLength(compressed) == 0) {  // C++ still decompresses: the frame must hold nothing
            long n = compressed.writerIndex() - CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
            if (n > 0 && lz4) {
                Lz4Frames.decompress(compressed, CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH, n, null, 0);
            } else if (n > 0) {
                try (ArrowBuf dst = allocator.buffer(8)) {
                    long got = Zstd.decompressUnsafe(dst.memoryAddress(), 0,
                        compressed.memoryAddress() + CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH, n);
                    if (Zstd.isError(got) || got != 0) {
                        throw new IllegalArgumentException("ZSTD decompression failed: "
                            + (Zstd.isError(got) ? Zstd.getErrorName(got) : got + " bytes where 0 were declared"));
                    }
                }
            }
        }
        ArrowBuf out = super.decompress(allocator, compressed);
        Long length = allNull.get(compressed);
        if (length != null) {
            checkAllNull(out, length);
        }
        return out;
    }

    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressed) {
        throw new UnsupportedOperationException("the reader's codec does not compress");
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressed) {
        long declared = readUncompressedLength(compressed);
        if (lz4) {  // declared was bounded with the message's other sizes before anything was read
            ArrowBuf out = allocator.buffer(declared);
            try {
                Lz4Frames.decompress(compressed, CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH,
                    compressed.writerIndex() - CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH, out, declared);
            } catch (RuntimeException e) {
                out.close();
                throw e;
            }
            out.writerIndex(declared);
            return out;
        }
        ArrowBuf out = allocator.buffer(declared);
        long got = Zstd.decompressUnsafe(out.memoryAddress(), declared,
            compressed.memoryAddress() + CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH,
            compressed.writerIndex() - CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH);
        if (Zstd.isError(got) || got != declared) {
            out.close();
            throw new IllegalArgumentException("ZSTD decompression failed: "
                + (Zstd.isError(got) ? Zstd.getErrorName(got) : got + " bytes where " + declared + " were declared"));
        }
        out.writerIndex(declared);
        return out;
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
        return CompressionUtil.CodecType.ZSTD;
    }
}
