package eventlog.spark;

import java.net.URI;
import java.nio.file.Paths;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.SparkSession;

/**
 * The Spark settings of capture by configuration ({@link CaptureExtension}), read from a session's
 * configuration when a plan fragment is prepared (so {@code spark.conf.set} between queries takes effect):
 * <ul>
 * <li>{@code spark.eventlog.capture.enabled} ({@code true}): capture at all;</li>
 * <li>{@code spark.eventlog.capture.dir}: the file log the captured streams and plan documents go to (a local or
 * shared-disk path or {@code file://} URI); nothing is captured without it;</li>
 * <li>{@code spark.eventlog.capture.operators} ({@code exchanges}): {@code all}, {@code exchanges}, or a
 * comma-separated list of {@code exchanges}, operator names or types ({@code HashAggregate},
 * {@code SortExec}; any case) and operator ids ({@code 7});</li>
 * <li>{@code spark.eventlog.capture.query}: the query's name (default {@code q<N>}, the N-th query captured by
 * the application); streams are named {@code <query>.<id>-<operator>}.</li>
 * </ul>
 */
final class CaptureSettings {
    static final String PREFIX = "spark.eventlog.capture.";
    static final String ENABLED = PREFIX + "enabled";
    static final String DIR = PREFIX + "dir";
    static final String OPERATORS = PREFIX + "operators";
    static final String QUERY = PREFIX + "query";

    /** The log's root folder. */
    final String root;
    final boolean all;
    final boolean exchanges;
    /** Operator names and types chosen, lower case, without a trailing {@code exec}. */
    final Set<String> names = new HashSet<>();
    final Set<Integer> ids = new HashSet<>();
    /** The query name asked for, or null. */
    final String query;

    private CaptureSettings(String root, String operators, String query) {
        this.root = root;
        this.query = query == null || query.isBlank() ? null : query.trim();
        boolean a = false;
        boolean x = false;
        for (String item : operators.split(",")) {
            String s = item.trim().toLowerCase(Locale.ROOT);
            if (s.isEmpty()) {
                continue;
            }
            if (s.equals("all") || s.equals("*")) {
                a = true;
            } else if (s.equals("exchanges")) {
                x = true;
            } else if (s.chars().allMatch(Character::isDigit) && s.length() < 10) {
                ids.add(Integer.parseInt(s));
            } else {
                names.add(normal(s));
            }
        }
        this.all = a;
        this.exchanges = x;
    }

    /** An operator name or type as compared: lower case, spaces dropped, without a trailing {@code exec}. */
    static String normal(String name) {
        String s = name.toLowerCase(Locale.ROOT).replace(" ", "");
        return s.endsWith("exec") && s.length() > 4 ? s.substring(0, s.length() - 4) : s;
    }

    /** The settings of {@code session}, or null when capture is off (not enabled, or no directory). */
    static CaptureSettings of(SparkSession session) {
        String enabled = session.conf().get(ENABLED, "true");
        String dir = session.conf().get(DIR, "");
        if (!"true".equalsIgnoreCase(enabled.trim()) || dir.isBlank()) {
            return null;
        }
        return new CaptureSettings(rootOf(dir.trim()), session.conf().get(OPERATORS, "exchanges"),
            session.conf().get(QUERY, ""));
    }

    /** The local folder of {@code dir} (a path or {@code file://} URI); IllegalArgumentException otherwise. */
    static String rootOf(String dir) {
        if (dir.startsWith("file:")) {
            return Paths.get(URI.create(dir)).toString();
        }
        if (dir.matches("^[A-Za-z][A-Za-z0-9+.-]*://.*")) {
            throw new IllegalArgumentException(DIR + "=" + dir + ": capture by configuration writes file logs on a "
                + "local or shared disk (a path or file:// URI)");
        }
        return Paths.get(dir).toAbsolutePath().toString();
    }
}
