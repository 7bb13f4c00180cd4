package eventlog.spark;

import com.google.flatbuffers.FlatBufferBuilder;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.compression.ZstdCompressionCodec;
import org.apache.arrow.flatbuf.KeyValue;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.MetadataVersion;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.VectorUnloader;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * Events as Arrow IPC record-batch messages (FORMAT.md §4, §4.1): V5 metadata, the event's custom metadata
 * ({@code eventlog.seq}, {@code eventlog.kind}, {@code eventlog.time} / {@code eventlog.updates},
 * {@code eventlog.ts}) in the Message flatbuffer, buffers zstd-compressed (Messages) or not (Progress, as
 * the Python writer does), 8-byte aligned. Arrow Java's own serializer has no custom metadata on record
 * batches, so the Message table is built here.
 */
final class EventEncoder {
    static final int MAX_EVENT_RECORDS = 1 << 20;
    static final long MAX_EVENT_VALUES = 1L << 24;
    static final long MAX_EVENT_BYTES = 1L << 30;

    /** An event over the format's limits of records or values: the caller writes its rows as several events. */
    static final class TooLarge extends IllegalStateException {
        private static final long serialVersionUID = 1L;

        TooLarge(String message) {
            super(message);
        }
    }

    private final CompressionCodec zstd = new ZstdCompressionCodec(1);
    /** The last event encoded; {@link Bytes#recycle} it once the encoder is done. */
    final Bytes out = Bytes.pooled(1 << 16);

    static Schema readSchema(byte[] message) throws IOException {
        return MessageSerializer.deserializeSchema(
            new ReadChannel(Channels.newChannel(new java.io.ByteArrayInputStream(message))));
    }

    /** The IPC Schema message of {@code schema} with {@code extra} added to its custom metadata. */
    static byte[] schemaMessage(Schema schema, Map<String, String> extra) throws IOException {
        Map<String, String> meta = new LinkedHashMap<>();
        if (schema.getCustomMetadata() != null) {
            meta.putAll(schema.getCustomMetadata());
        }
        meta.putAll(extra);
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        MessageSerializer.serialize(new WriteChannel(Channels.newChannel(bytes)), new Schema(schema.getFields(), meta));
        return bytes.toByteArray();
    }

    /**
     * Encode {@code root}'s rows as one event into {@link #out} (reset first); {@code meta}: key, value pairs
     * in order. Throws when the event is over the format's limits (FORMAT.md §8).
     */
    void encode(VectorSchemaRoot root, boolean compress, String[] meta) throws IOException {
        encode(root, compress, null, null, meta);
    }

    /**
     * As {@link #encode(VectorSchemaRoot, boolean, String[])}, with int64 columns of one value each after
     * {@code root}'s ({@code constants}, compressed: {@code _time} and {@code _seq}): no validity buffer, the
     * values as a frame built directly ({@link ConstantFrame}), as the Python writer writes them.
     */
    void encode(VectorSchemaRoot root, boolean compress, BufferAllocator alloc, long[] constants, String[] meta)
            throws IOException {
        out.reset();
        VectorUnloader unloader = new VectorUnloader(root, true, compress ? zstd : NoCompressionCodec.INSTANCE, true);
        try (ArrowRecordBatch records = unloader.getRecordBatch()) {
            if (constants == null) {
                write(records, meta);
                return;
            }
            try (ArrowRecordBatch batch = withConstants(records, alloc, constants)) {
                write(batch, meta);
            }
        }
    }

    /** {@code batch} as the event's message, into {@link #out}. */
    private void write(ArrowRecordBatch batch, String[] meta) throws IOException {
        if (batch.getLength() > MAX_EVENT_RECORDS) {
            throw new TooLarge("event of " + batch.getLength() + " records, over the format's limit");
        }
        long values = 0;
        for (ArrowFieldNode n : batch.getNodes()) {
            values += n.getLength();
        }
        if (values > MAX_EVENT_VALUES) {
            throw new TooLarge("event of " + values + " values (array slots), over the format's limit of "
                + MAX_EVENT_VALUES);
        }
        FlatBufferBuilder fb = new FlatBufferBuilder(1024);
        int header = batch.writeTo(fb);
        int[] kvs = new int[meta.length / 2];
        for (int i = 0; i < kvs.length; i++) {
            int k = fb.createString(meta[2 * i]);
            int v = fb.createString(meta[2 * i + 1]);
            kvs[i] = KeyValue.createKeyValue(fb, k, v);
        }
        int custom = Message.createCustomMetadataVector(fb, kvs);
        long bodyLength = batch.computeBodyLength();
        Message.startMessage(fb);
        Message.addHeaderType(fb, MessageHeader.RecordBatch);
        Message.addHeader(fb, header);
        Message.addVersion(fb, MetadataVersion.V5);
        Message.addBodyLength(fb, bodyLength);
        Message.addCustomMetadata(fb, custom);
        fb.finish(Message.endMessage(fb));
        ByteBuffer flat = fb.dataBuffer();
        int flatLen = flat.remaining();
        int padded = flatLen + Math.floorMod(-(flatLen + 8), 8);
        out.int32(-1);
        out.int32(padded);
        byte[] tmp = new byte[flatLen];
        flat.get(tmp);
        out.write(tmp, 0, flatLen);
        out.zeros(padded - flatLen);
        int bodyStart = out.len;
        // a channel per body: its position (which aligns the buffers) counts from the body's start
        long written = MessageSerializer.writeBatchBuffers(new WriteChannel(Channels.newChannel(out)), batch);
        int got = out.len - bodyStart;
        if (written != got || got > bodyLength) {
            throw new IllegalStateException("record batch body of " + got + " bytes, declared " + bodyLength);
        }
        out.zeros((int) (bodyLength - got));
        if (out.len > MAX_EVENT_BYTES) {
            throw new TooLarge("event of " + out.len + " bytes, over the format's limit");
        }
    }

    /**
     * {@code records} with the constant int64 columns appended (a second batch over the same buffers): zstd frames
     * built directly in a compressed event, the values themselves in an uncompressed one (as the Python writer).
     */
    private static ArrowRecordBatch withConstants(ArrowRecordBatch records, BufferAllocator alloc, long[] constants) {
        int n = records.getLength();
        byte codec = records.getBodyCompression().getCodec();
        boolean raw = codec == NoCompressionCodec.COMPRESSION_TYPE;
        if (n < 1 || !raw && codec != CompressionUtil.CodecType.ZSTD.getType()) {
            throw new IllegalStateException("constant columns are written into zstd or uncompressed events of rows");
        }
        List<ArrowFieldNode> nodes = new ArrayList<>(records.getNodes());
        List<ArrowBuf> buffers = new ArrayList<>(records.getBuffers());
        List<ArrowBuf> own = new ArrayList<>();
        try {
            for (long value : constants) {
                ArrowBuf data;
                if (raw) {
                    data = alloc.buffer(8L * n);
                    own.add(data);
                    for (int i = 0; i < n; i++) {
                        data.setLong(8L * i, value);
                    }
                    data.writerIndex(8L * n);
                } else {
                    byte[] frame = ConstantFrame.int64(value, n);
                    data = alloc.buffer(8 + frame.length);
                    own.add(data);
                    data.setLong(0, 8L * n);  // the uncompressed length before the frame (BodyCompression)
                    data.setBytes(8, frame);
                    data.writerIndex(8 + frame.length);
                }
                nodes.add(new ArrowFieldNode(n, 0));
                buffers.add(alloc.getEmpty());  // no validity buffer: no nulls
                buffers.add(data);
            }
            return new ArrowRecordBatch(n, nodes, buffers, records.getBodyCompression(),
                records.getVariadicBufferCounts(), true);
        } finally {
            for (ArrowBuf b : own) {
                b.close();  // the batch holds its own reference
            }
        }
    }
}
