package eventlog.spark;

import java.util.List;

/**
 * The Arrow IPC file's suffix of a sealed 2.x segment, built exactly as {@code eventlog/encoding/ipc_file.py}
 * builds it: the end-of-stream marker, the {@code Footer} flatbuffer (metadata version V5, the schema copied
 * from the segment's schema message, no dictionaries, one Block per event), its length and {@code ARROW1}.
 */
final class Footer {
    static final byte[] FILE_MAGIC = {'A', 'R', 'R', 'O', 'W', '1'};
    static final byte[] LEADING_MAGIC = {'A', 'R', 'R', 'O', 'W', '1', 0, 0};
    private static final short V5 = 4;

    private Footer() {
    }

    /** Position of the Schema table inside a Schema message's flatbuffer ({@code Message.header}). */
    static int schemaTable(byte[] fb) {
        int table = Bytes.int32At(fb, 0);
        int vtable = table - Bytes.int32At(fb, table);
        int vtSize = Bytes.uint16At(fb, vtable);
        if (vtSize < 4 + 2 * 3) {
            throw new IllegalArgumentException("schema message has no header");
        }
        int rel = Bytes.uint16At(fb, vtable + 4 + 2 * 2);
        if (rel == 0) {
            throw new IllegalArgumentException("schema message has no header");
        }
        int at = table + rel;
        return at + Bytes.int32At(fb, at);
    }

    /** {@code blocks}: (offset, metadata length, body length) per event, in order. */
    static byte[] build(byte[] schemaMessage, List<long[]> blocks) {
        int metaLen = Bytes.int32At(schemaMessage, 4);
        byte[] fb = java.util.Arrays.copyOfRange(schemaMessage, 8, 8 + metaLen);
        int schemaAt = schemaTable(fb);
        int tableAt = 16;
        int vtableAt = 4;
        Bytes out = new Bytes(64 + 24 * blocks.size() + fb.length);
        out.int32(tableAt);
        for (int v : new int[] {12, 20, 4, 8, 12, 16}) {
            out.int16(v);
        }
        out.int32(tableAt - vtableAt);
        out.int16(V5);
        out.zeros(2);
        int slots = out.len;
        out.zeros(12);
        out.zeros(Math.floorMod(-(out.len + 4), 8));
        int dictsAt = out.len;
        out.int32(0);
        out.zeros(Math.floorMod(-(out.len + 4), 8));
        int batchesAt = out.len;
        out.int32(blocks.size());
        for (long[] b : blocks) {
            out.int64(b[0]);
            out.int32((int) b[1]);
            out.zeros(4);
            out.int64(b[2]);
        }
        out.zeros(Math.floorMod(-out.len, 8));
        int messageAt = out.len;
        out.write(fb, 0, fb.length);
        out.zeros(Math.floorMod(-out.len, 8));
        int[] targets = {messageAt + schemaAt, dictsAt, batchesAt};
        for (int i = 0; i < 3; i++) {
            int at = slots + 4 * i;
            out.setInt32(at, targets[i] - at);
        }
        int n = out.len;
        Bytes all = new Bytes(n + 32);
        all.int32(-1);
        all.int32(0);
        all.write(out.buf, 0, n);
        all.int32(n);
        all.write(FILE_MAGIC, 0, FILE_MAGIC.length);
        return all.toArray();
    }
}
