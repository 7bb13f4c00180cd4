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
 * shared-disk path, a {@code file://} URI, or {@code s3://bucket/prefix} for batch queries); nothing is captured
 * without it;</li>
 * <li>on S3, the store's endpoint, region and credentials: {@code spark.eventlog.capture.s3.endpoint},
 * {@code .region}, {@code .accessKey}, {@code .secretKey}, {@code .sessionToken}; each else the S3A setting
 * Spark users set ({@code spark.hadoop.fs.s3a.endpoint}, {@code .endpoint.region}, {@code .access.key},
 * {@code .secret.key}, {@code .session.token}), else the driver's {@code AWS_ENDPOINT_URL_S3}/{@code
 * AWS_ENDPOINT_URL}, {@code AWS_REGION}/{@code AWS_DEFAULT_REGION}, {@code AWS_ACCESS_KEY_ID},
 * {@code AWS_SECRET_ACCESS_KEY}, {@code AWS_SESSION_TOKEN}; shipped to the tasks;</li>
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

    /** The log's root folder; on S3, the log's key prefix in the bucket (no slashes around). */
    final String root;
    /** The S3 store's settings as {@link ObjectStore#of} takes them, or null for a local file log. */
    final String[] store;
    final boolean all;
    final boolean exchanges;
    /** Operator names and types chosen, lower case, without a trailing {@code exec}. */
    final Set<String> names = new HashSet<>();
    final Set<Integer> ids = new HashSet<>();
    /** The query name asked for, or null. */
    final String query;

    private CaptureSettings(String root, String[] store, String operators, String query) {
        this.root = root;
        this.store = store;
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
        String d = dir.trim();
        String[] store = null;
        String root;
        if (d.startsWith("s3://") || d.startsWith("s3a://")) {
            String rest = d.substring(d.indexOf("://") + 3);
            int slash = rest.indexOf('/');
            String bucket = slash < 0 ? rest : rest.substring(0, slash);
            if (bucket.isEmpty()) {
                throw new IllegalArgumentException(DIR + "=" + dir + ": no bucket");
            }
            root = slash < 0 ? "" : rest.substring(slash + 1).replaceAll("^/+|/+$", "");
            store = storeSettings(session, bucket);
        } else {
            root = rootOf(d);
        }
        return new CaptureSettings(root, store, session.conf().get(OPERATORS, "exchanges"),
            session.conf().get(QUERY, ""));
    }

    /** {@code [endpoint or "", region, bucket, access key or "", secret key, session token or ""]} for S3. */
    private static String[] storeSettings(SparkSession session, String bucket) {
        String endpoint = setting(session, "endpoint", "fs.s3a.endpoint", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
        if (!endpoint.isEmpty() && !endpoint.contains("://")) {
            boolean ssl = !"false".equalsIgnoreCase(session.conf().get("spark.hadoop.fs.s3a.connection.ssl.enabled",
                "true"));
            endpoint = (ssl ? "https://" : "http://") + endpoint;
        }
        String region = setting(session, "region", "fs.s3a.endpoint.region", "AWS_REGION", "AWS_DEFAULT_REGION");
        String access = setting(session, "accessKey", "fs.s3a.access.key", "AWS_ACCESS_KEY_ID", null);
        String secret = setting(session, "secretKey", "fs.s3a.secret.key", "AWS_SECRET_ACCESS_KEY", null);
        String token = setting(session, "sessionToken", "fs.s3a.session.token", "AWS_SESSION_TOKEN", null);
        if (access.isEmpty() || secret.isEmpty()) {
            throw new IllegalArgumentException(DIR + " is on S3 but no credentials are set (" + PREFIX
                + "s3.accessKey and .secretKey, spark.hadoop.fs.s3a.access.key and .secret.key, or "
                + "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY on the driver)");
        }
        return new String[] {endpoint, region.isEmpty() ? "us-east-1" : region, bucket, access, secret, token};
    }

    private static String setting(SparkSession session, String own, String s3a, String env, String env2) {
        String v = session.conf().get(PREFIX + "s3." + own, "");
        if (v.isBlank()) {
            v = session.conf().get("spark.hadoop." + s3a, "");
        }
        if (v.isBlank() && env != null) {
            v = System.getenv(env) == null ? "" : System.getenv(env);
        }
        if (v.isBlank() && env2 != null) {
            v = System.getenv(env2) == null ? "" : System.getenv(env2);
        }
        return v.trim();
    }

    /** The local folder of {@code dir} (a path or {@code file://} URI); IllegalArgumentException otherwise. */
    static String rootOf(String dir) {
        if (dir.startsWith("file:")) {
            return Paths.get(URI.create(dir)).toString();
        }
        if (dir.matches("^[A-Za-z][A-Za-z0-9+.-]*://.*")) {
            throw new IllegalArgumentException(DIR + "=" + dir + ": capture by configuration writes file logs on a "
                + "local or shared disk (a path or file:// URI) or on S3 (s3://bucket/prefix)");
        }
        return Paths.get(dir).toAbsolutePath().toString();
    }
}
