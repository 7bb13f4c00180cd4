package eventlog.spark;

import java.io.ByteArrayOutputStream;

/**
 * The Zstandard frame of an int64 column holding one value, built without a compressor, as
 * {@code eventlog/encoding/zstd_frame.py::constant_int64_frame} builds it for the Python writer (RFC 8878): the
 * value's 8 bytes as literals, then matches 8 bytes back, one block per 128 KiB. zstd's compressor spends a
 * few hundred microseconds on the 512 KiB of a 65,536-row {@code _time} or {@code _seq} column; this takes
 * microseconds and is a few dozen bytes.
 */
public final class ConstantFrame {
    private static final int MAGIC = 0xFD2FB528;
    private static final int MAX_BLOCK = 128 * 1024;
    /** Match_Length codes 32..52: baseline, extra bits (codes 0..31 are lengths 3..34). */
    private static final int[][] ML_CODES = {
        {35, 1}, {37, 1}, {39, 1}, {41, 1}, {43, 2}, {47, 2}, {51, 3}, {59, 3}, {67, 4}, {83, 4}, {99, 5},
        {131, 7}, {259, 8}, {515, 9}, {1027, 10}, {2051, 11}, {4099, 12}, {8195, 13}, {16387, 14}, {32771, 15},
        {65539, 16}};
    /** Offset_Value of a match 8 bytes back (values 1..3 are repeat codes), and its code. */
    private static final int OFFSET_VALUE = 8 + 3;
    private static final int OF_CODE = 3;

    private ConstantFrame() {
    }

    private static void le(ByteArrayOutputStream out, long v, int bytes) {
        for (int i = 0; i < bytes; i++) {
            out.write((int) (v >>> (8 * i)) & 0xff);
        }
    }

    /** A compressed block emitting {@code literals} (at most 31 bytes), then one match of {@code length} bytes
     * 8 back: one sequence, its three symbol tables in RLE mode (no FSE state bits). */
    private static void matchBlock(ByteArrayOutputStream out, byte[] literals, int length, boolean last) {
        int mlCode;
        int mlExtra = 0;
        int mlBits = 0;
        if (length <= 34) {
            mlCode = length - 3;
        } else {
            int i = ML_CODES.length - 1;
            while (length < ML_CODES[i][0]) {
                i--;
            }
            mlCode = 32 + i;
            mlExtra = length - ML_CODES[i][0];
            mlBits = ML_CODES[i][1];
        }
        // read backwards by the decoder: the offset's extra bits, then the match length's; an end mark above
        long bits = mlExtra | ((long) (OFFSET_VALUE - (1 << OF_CODE)) << mlBits) | (1L << (mlBits + OF_CODE));
        int streamBytes = (mlBits + OF_CODE + 8) / 8;
        int contentLength = 1 + literals.length + 5 + streamBytes;
        le(out, (last ? 1 : 0) | (2 << 1) | ((long) contentLength << 3), 3);  // Compressed_Block
        out.write(literals.length << 3);  // Raw_Literals_Block, 1-byte header
        out.write(literals, 0, literals.length);
        out.write(1);  // one sequence
        out.write(0x54);  // literal length, offset and match length tables in RLE mode
        out.write(literals.length);
        out.write(OF_CODE);
        out.write(mlCode);
        le(out, bits, streamBytes);
    }

    /** The frame whose content is {@code count} (at least 1) little-endian copies of {@code value}. */
    public static byte[] int64(long value, long count) {
        if (count < 1) {
            throw new IllegalArgumentException("a frame of no values");
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream(64);
        long size = 8 * count;
        int fcs = size < (1L << 32) ? 4 : 8;
        le(out, MAGIC, 4);
        // Frame_Header_Descriptor: content size in fcs bytes, no single segment, no checksum; a 128 KiB window
        out.write((fcs == 4 ? 2 : 3) << 6);
        out.write(0x38);
        le(out, size, fcs);
        byte[] pattern = new byte[8];
        for (int i = 0; i < 8; i++) {
            pattern[i] = (byte) (value >>> (8 * i));
        }
        if (count == 1) {
            le(out, 1 | (8 << 3), 3);  // one Raw_Block
            out.write(pattern, 0, 8);
            return out.toByteArray();
        }
        long first = Math.min(size, MAX_BLOCK);
        matchBlock(out, pattern, (int) first - 8, first == size);
        long rest = size - first;
        byte[] none = new byte[0];
        while (rest > 0) {
            long block = Math.min(rest, MAX_BLOCK);
            rest -= block;
            matchBlock(out, none, (int) block, rest == 0);
        }
        return out.toByteArray();
    }
}
