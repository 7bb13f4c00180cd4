package eventlog.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The stream header (FORMAT.md §2) of a format 2.0 file-log stream of int64 times and the arrow encoding, as
 * {@code eventlog.header.StreamHeader.to_json} writes it (the JSON's layout aside): what the capture extension
 * creates a captured operator's stream with, on the driver, without Python.
 */
final class StreamHeaderJson {
    static final String VERSION = "2.0";
    private static final DateTimeFormatter CREATED =
        DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

    private StreamHeaderJson() {
    }

    /** The IPC Schema message of {@code schema} (no custom metadata), as {@code pyarrow.Schema.serialize()}. */
    static byte[] schemaMessage(List<Field> fields) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        MessageSerializer.serialize(new WriteChannel(Channels.newChannel(bytes)), new Schema(fields));
        return bytes.toByteArray();
    }

    /** The current time as a header's {@code created}. */
    static String now() {
        return CREATED.format(Instant.now());
    }

    /** The header of {@code stream} with {@code peers} parts and the record schema {@code fields}, UTF-8 JSON. */
    static byte[] header(String stream, int peers, List<Field> fields, String created) throws IOException {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("format", "eventlog");
        doc.put("version", VERSION);
        doc.put("stream", stream);
        doc.put("peers", peers);
        doc.put("time", "int64");
        doc.put("encoding", "arrow");
        doc.put("created", created);
        doc.put("schema", Base64.getEncoder().encodeToString(schemaMessage(fields)));
        List<Object> shown = new ArrayList<>();
        for (Field f : fields) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("name", f.getName());
            one.put("type", typeName(f));
            one.put("nullable", f.isNullable());
            shown.add(one);
        }
        doc.put("fields", shown);
        doc.put("checksum", "sha256:" + sha256(CanonicalJson.bytes(doc)));
        return (CanonicalJson.write(doc) + "\n").getBytes(StandardCharsets.UTF_8);
    }

    private static String sha256(byte[] data) {
        try {
            return PartCapture.hex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The type as pyarrow prints it ({@code int64}, {@code list<element: int32>}; informational only). */
    static String typeName(Field f) {
        ArrowType t = f.getType();
        switch (t.getTypeID()) {
            case Int: {
                ArrowType.Int i = (ArrowType.Int) t;
                return (i.getIsSigned() ? "int" : "uint") + i.getBitWidth();
            }
            case FloatingPoint:
                switch (((ArrowType.FloatingPoint) t).getPrecision()) {
                    case HALF: return "halffloat";
                    case SINGLE: return "float";
                    default: return "double";
                }
            case Utf8: return "string";
            case LargeUtf8: return "large_string";
            case Binary: return "binary";
            case LargeBinary: return "large_binary";
            case Bool: return "bool";
            case Null: return "null";
            case Date: return ((ArrowType.Date) t).getUnit() == org.apache.arrow.vector.types.DateUnit.DAY
                ? "date32[day]" : "date64[ms]";
            case Timestamp: {
                ArrowType.Timestamp ts = (ArrowType.Timestamp) t;
                String unit = ts.getUnit().name().toLowerCase(java.util.Locale.ROOT);
                unit = unit.equals("second") ? "s" : unit.equals("millisecond") ? "ms"
                    : unit.equals("microsecond") ? "us" : "ns";
                return "timestamp[" + unit + (ts.getTimezone() == null ? "" : ", tz=" + ts.getTimezone()) + "]";
            }
            case Decimal: {
                ArrowType.Decimal d = (ArrowType.Decimal) t;
                return "decimal" + d.getBitWidth() + "(" + d.getPrecision() + ", " + d.getScale() + ")";
            }
            case List: {
                Field item = f.getChildren().get(0);
                return "list<" + item.getName() + ": " + typeName(item) + ">";
            }
            case Struct: {
                StringBuilder s = new StringBuilder("struct<");
                for (int i = 0; i < f.getChildren().size(); i++) {
                    Field c = f.getChildren().get(i);
                    s.append(i > 0 ? ", " : "").append(c.getName()).append(": ").append(typeName(c));
                }
                return s.append('>').toString();
            }
            case Map: {
                List<Field> kv = f.getChildren().get(0).getChildren();
                return "map<" + typeName(kv.get(0)) + ", " + typeName(kv.get(1)) + ">";
            }
            default:
                return t.toString();
        }
    }
}
