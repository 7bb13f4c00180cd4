package eventlog.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.Duration;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The S3 requests the JVM tap makes (an S3-protocol store: AWS S3, MinIO, moto, Ceph …): {@code PutObject}, with
 * {@code If-None-Match: *} for exclusive creates (of attempts racing for one part exactly one creates its first
 * segment, as {@code connectors/files/storage.py::S3Storage.create_exclusive}), {@code HeadObject}, and for the
 * reader {@code GetObject} and {@code ListObjectsV2}, signed with AWS Signature Version 4. The endpoint, region
 * and credentials are the ones the driver resolved ({@code connectors/spark/jvm}), shipped with the tasks.
 * Requests that fail in transport or with a 5xx, 429 or a conditional-write conflict (409) are retried a few times
 * with back-off ({@link #call}); other refusals raise IOException naming the object and the store's error code,
 * and, when AWS answers that the bucket is in another region than the one signed for, that region and how to set it.
 */
final class ObjectStore implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final int RETRIES = 5;
    /** The most bytes read of an answer to a put or a head, or of an error document. */
    private static final int ANSWER_BYTES = 1 << 20;
    /** The most bytes read of one listing page (1,000 keys of up to 1 KiB each, with their XML). */
    private static final int LISTING_BYTES = 8 << 20;
    private static final DateTimeFormatter STAMP = DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'");
    private static final String EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    private static volatile HttpClient client;

    /** {@code scheme://host[:port]} of the store (path-style requests), or null for AWS S3 (virtual hosts). */
    final String endpoint;
    final String region;
    final String bucket;
    private final String accessKey;
    private final String secretKey;
    private final String sessionToken;

    ObjectStore(String endpoint, String region, String bucket, String accessKey, String secretKey,
                String sessionToken) {
        this.endpoint = endpoint == null || endpoint.isEmpty() ? null : stripSlash(endpoint);
        this.region = region == null || region.isEmpty() ? "us-east-1" : region;
        this.bucket = bucket;
        this.accessKey = accessKey == null || accessKey.isEmpty() ? null : accessKey;
        this.secretKey = secretKey;
        this.sessionToken = sessionToken == null || sessionToken.isEmpty() ? null : sessionToken;
    }

    /**
     * The store of {@code settings} ({@code [endpoint or "", region, bucket, access key or "", secret key, session
     * token or ""]}, as the driver resolved them: {@code connectors/spark/jvm::_where}), or null for none.
     */
    static ObjectStore of(String[] settings) {
        return settings == null ? null
            : new ObjectStore(settings[0], settings[1], settings[2], settings[3], settings[4], settings[5]);
    }

    private static String stripSlash(String s) {
        return s.endsWith("/") ? s.substring(0, s.length() - 1) : s;
    }

    /** {@code s3://bucket/key}, for messages. */
    String display(String key) {
        return "s3://" + bucket + "/" + key;
    }

    /**
     * Put the file at {@code key}; with {@code exclusive}, only if no object is there (false, changing nothing,
     * when one is).
     */
    boolean put(String key, Path file, boolean exclusive) throws IOException {
        String hash = endpoint != null && endpoint.startsWith("http://") ? sha256Hex(file) : "UNSIGNED-PAYLOAD";
        Answer r = call(() -> request("PUT", key, null, hash, exclusive).PUT(HttpRequest.BodyPublishers.ofFile(file)),
            key, ANSWER_BYTES);
        if (r.status / 100 == 2) {
            return true;
        }
        if (exclusive && r.status == 412) {
            return false;  // PreconditionFailed: the object exists
        }
        throw refused("PutObject", key, r);
    }

    /** Whether an object exists at {@code key}. */
    boolean exists(String key) throws IOException {
        Answer r = call(() -> request("HEAD", key, null, EMPTY_SHA256, false)
            .method("HEAD", HttpRequest.BodyPublishers.noBody()), key, ANSWER_BYTES);
        if (r.status / 100 == 2) {
            return true;
        }
        if (r.status == 404) {
            return false;
        }
        throw refused("HeadObject", key, r);
    }

    /**
     * The object at {@code key}, or null when there is none; IOException when it is larger than {@code limit}
     * bytes (checked before anything is allocated).
     */
    byte[] get(String key, long limit) throws IOException {
        java.io.ByteArrayOutputStream out = fetchWhole(key, Math.min(limit, Integer.MAX_VALUE - 64),
            java.io.ByteArrayOutputStream::new);
        return out == null ? null : out.toByteArray();
    }

    /**
     * Write the object at {@code key} into the local file {@code file} (replacing it); false, writing nothing,
     * when there is none; IOException when it is larger than {@code limit} bytes.
     */
    boolean download(String key, Path file, long limit) throws IOException {
        return fetchWhole(key, limit, () -> new java.io.BufferedOutputStream(Files.newOutputStream(file), 1 << 20))
            != null;
    }

    /** Opens a fresh sink for one try of a fetch. */
    private interface Sink<S extends java.io.OutputStream> {
        S open() throws IOException;
    }

    /**
     * {@link #fetch} into a fresh sink (closed when it returns), again when the body was cut short in transport;
     * the sink, or null when there is no object.
     */
    private <S extends java.io.OutputStream> S fetchWhole(String key, long limit, Sink<S> sink) throws IOException {
        for (int tries = 0; ; tries++) {
            try (S out = sink.open()) {
                return fetch(key, limit, out) ? out : null;
            } catch (Truncated e) {
                if (tries + 1 >= RETRIES) {
                    throw e;
                }
                backOff(tries);
            }
        }
    }

    /** An answer whose body ended before its Content-Length. */
    private static final class Truncated extends IOException {
        private static final long serialVersionUID = 1L;

        Truncated(String message) {
            super(message);
        }
    }

    private boolean fetch(String key, long limit, java.io.OutputStream sink) throws IOException {
        HttpResponse<InputStream> r = respond(() -> request("GET", key, null, EMPTY_SHA256, false).GET(), key);
        try (InputStream in = r.body()) {
            int status = r.statusCode();
            if (status == 404) {
                return false;
            }
            if (status / 100 != 2) {
                throw refused("GetObject", key, new Answer(status, in.readNBytes(ANSWER_BYTES), bucketRegion(r)));
            }
            long length = r.headers().firstValueAsLong("Content-Length").orElse(-1);
            if (length > limit) {
                throw new IOException(display(key) + " is " + length + " bytes, over the " + limit
                    + " bytes it may have");
            }
            byte[] buf = new byte[1 << 16];
            long got = 0;
            for (int n; (n = in.read(buf)) > 0; ) {
                got += n;
                if (got > limit) {
                    throw new IOException(display(key) + " is over the " + limit + " bytes it may have");
                }
                sink.write(buf, 0, n);
            }
            if (length >= 0 && got != length) {
                throw new Truncated(display(key) + ": the store sent " + got + " of " + length + " bytes");
            }
            return true;
        }
    }

    /** The names of the objects directly below {@code prefix + "/"} (not below a further {@code /}), sorted. */
    java.util.List<String> list(String prefix) throws IOException {
        return listing(prefix, "/", false);
    }

    /** The names of the folders directly below {@code prefix + "/"} (the key prefixes up to a further {@code /},
     * without it), sorted. */
    java.util.List<String> folders(String prefix) throws IOException {
        return listing(prefix, "/", true);
    }

    /** The keys of every object below {@code prefix + "/"}, relative to it ({@code a/b}), sorted. */
    java.util.List<String> listTree(String prefix) throws IOException {
        return listing(prefix, null, false);
    }

    private java.util.List<String> listing(String prefix, String delimiter, boolean folders) throws IOException {
        String p = prefix.isEmpty() || prefix.endsWith("/") ? prefix : prefix + "/";
        java.util.TreeSet<String> names = new java.util.TreeSet<>();
        String token = null;
        for (int page = 0; page < 100_000; page++) {
            java.util.TreeMap<String, String> query = new java.util.TreeMap<>();
            query.put("list-type", "2");
            query.put("prefix", p);
            if (delimiter != null) {
                query.put("delimiter", delimiter);
            }
            if (token != null) {
                query.put("continuation-token", token);
            }
            Answer r = call(() -> request("GET", null, query, EMPTY_SHA256, false).GET(), p, LISTING_BYTES);
            if (r.status / 100 != 2) {
                throw refused("ListObjectsV2", p, r);
            }
            org.w3c.dom.Document doc = ListXml.parse(r.body, display(p));
            if (folders) {
                for (String key : ListXml.texts(doc, "CommonPrefixes", "Prefix")) {
                    if (key.startsWith(p) && key.endsWith("/") && key.length() > p.length() + 1
                            && key.indexOf('/', p.length()) == key.length() - 1) {
                        names.add(key.substring(p.length(), key.length() - 1));
                    }
                }
            } else {
                for (String key : ListXml.texts(doc, "Contents", "Key")) {
                    if (key.startsWith(p) && key.length() > p.length()
                            && (delimiter == null || key.indexOf('/', p.length()) < 0)) {
                        names.add(key.substring(p.length()));
                    }
                }
            }
            java.util.List<String> next = ListXml.texts(doc, null, "NextContinuationToken");
            java.util.List<String> truncated = ListXml.texts(doc, null, "IsTruncated");
            if (next.isEmpty() || truncated.isEmpty() || !truncated.get(0).equals("true")) {
                return new java.util.ArrayList<>(names);
            }
            token = next.get(0);
        }
        throw new IOException("listing " + display(p) + " did not end");
    }

    /** Remove the object at {@code key} (nothing when there is none: S3 answers 204 either way). */
    void delete(String key) throws IOException {
        Answer r = call(() -> request("DELETE", key, null, EMPTY_SHA256, false).DELETE(), key, ANSWER_BYTES);
        if (r.status / 100 != 2 && r.status != 404) {
            throw refused("DeleteObject", key, r);
        }
    }

    private static boolean retryable(int status) {
        return status >= 500 || status == 429 || status == 409;  // 409: a concurrent conditional write, retry it
    }

    /**
     * A status, a body read whole (at most the cap the request was sent with), and the region AWS says the bucket
     * is in ({@code x-amz-bucket-region}, on its redirects and errors), or null.
     */
    private record Answer(int status, byte[] body, String bucketRegion) {
    }

    private static String bucketRegion(HttpResponse<?> r) {
        return r.headers().firstValue("x-amz-bucket-region").orElse(null);
    }

    /** Builds a request afresh for each try (its date and signature are of the moment it is sent). */
    private interface Request {
        HttpRequest.Builder build() throws IOException;
    }

    /**
     * The store's answer to the request, tried again after a transport failure or a retryable status (5xx, 429,
     * 409) while tries remain; its body read up to {@code cap} bytes (IOException past it: nothing unbounded is
     * held). The caller judges the last answer's status.
     */
    private Answer call(Request make, String key, int cap) throws IOException {
        HttpResponse<InputStream> r = respond(make, key);
        byte[] body;
        try (InputStream in = r.body()) {
            body = in.readNBytes(cap + 1);
        }
        if (body.length > cap) {
            throw new IOException("the S3 store's answer for " + display(key) + " (HTTP " + r.statusCode()
                + ") is over " + cap + " bytes");
        }
        return new Answer(r.statusCode(), body, bucketRegion(r));
    }

    /**
     * The store's response to the request (its body unread), tried again after a transport failure or a
     * retryable status while tries remain: the first other answer, or the last. A retried answer's body is read
     * (at most {@link #ANSWER_BYTES}) and dropped, which keeps its connection usable.
     */
    private HttpResponse<InputStream> respond(Request make, String key) throws IOException {
        for (int attempt = 0; ; attempt++) {
            HttpResponse<InputStream> r = exchange(make.build(), key, attempt);
            if (r == null) {
                continue;
            }
            if (attempt + 1 < RETRIES && retryable(r.statusCode())) {
                try (InputStream in = r.body()) {
                    in.readNBytes(ANSWER_BYTES);
                }
                backOff(attempt);
                continue;
            }
            return r;
        }
    }

    /** The response (its body unread), or null when the request failed in transport and is to be retried. */
    private HttpResponse<InputStream> exchange(HttpRequest.Builder b, String key, int attempt) throws IOException {
        try {
            return http().send(b.build(), HttpResponse.BodyHandlers.ofInputStream());
        } catch (IOException e) {
            if (attempt + 1 >= RETRIES) {
                throw new IOException("S3 store " + (endpoint == null ? "AWS S3" : endpoint) + " did not answer for "
                    + display(key) + " (" + RETRIES + " tries): " + e, e);
            }
            backOff(attempt);
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while waiting for the S3 store's answer for " + display(key), e);
        }
    }

    private static void backOff(int attempt) throws IOException {
        try {
            Thread.sleep(Math.min(2000L, 100L << attempt));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
    }

    /**
     * The store's refusal of {@code op} on {@code key}: its status, error code and message and, when AWS names
     * another region for the bucket (a {@code PermanentRedirect}, an {@code AuthorizationHeaderMalformed}, a head's
     * bare 301), that region and how to sign for it.
     */
    private IOException refused(String op, String key, Answer r) {
        String body = new String(r.body, StandardCharsets.UTF_8);
        String code = between(body, "<Code>", "</Code>");
        String message = between(body, "<Message>", "</Message>");
        String elsewhere = r.bucketRegion != null ? r.bucketRegion : between(body, "<Region>", "</Region>");
        if (elsewhere != null && !elsewhere.matches("[a-z0-9-]{1,40}")) {
            elsewhere = null;  // not a region name: not repeated to the user
        }
        String hint = elsewhere == null || elsewhere.equals(region) ? ""
            : "; the bucket " + bucket + " is in region " + elsewhere + ", these requests are signed for " + region
                + ": set AWS_REGION=" + elsewhere + " or add ?region=" + elsewhere + " to the log's URI";
        return new IOException("S3 " + op + " of " + display(key) + " refused: HTTP " + r.status
            + (code == null ? "" : " " + code) + (message == null ? "" : " (" + message + ")") + hint);
    }

    private static String between(String s, String open, String close) {
        int a = s.indexOf(open);
        int z = a < 0 ? -1 : s.indexOf(close, a + open.length());
        return z < 0 ? null : s.substring(a + open.length(), z);
    }

    private static HttpClient http() {
        HttpClient c = client;
        if (c == null) {
            synchronized (ObjectStore.class) {
                c = client;
                if (c == null) {
                    c = client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                        .connectTimeout(Duration.ofSeconds(10)).build();
                }
            }
        }
        return c;
    }

    /**
     * A signed request of {@code method} on {@code key} (null: the bucket) with {@code query} (sorted; null for
     * none) whose payload hashes to {@code payloadHash}.
     */
    private HttpRequest.Builder request(String method, String key, java.util.SortedMap<String, String> query,
                                        String payloadHash, boolean exclusive) throws IOException {
        String base;
        String path;
        if (endpoint != null || bucket.contains(".")) {
            // path-style to an endpoint; and on AWS for a bucket with dots, which AWS's TLS certificate
            // (*.s3.<region>.amazonaws.com) does not cover as a virtual host, as the AWS SDKs do
            base = endpoint != null ? endpoint : "https://s3." + region + ".amazonaws.com";
            path = "/" + encode(bucket) + (key == null ? "" : "/" + encodePath(key));
        } else {
            base = "https://" + bucket + ".s3." + region + ".amazonaws.com";
            path = "/" + (key == null ? "" : encodePath(key));
        }
        StringBuilder q = new StringBuilder();
        if (query != null) {
            for (java.util.Map.Entry<String, String> e : query.entrySet()) {
                q.append(q.length() == 0 ? "" : "&").append(encode(e.getKey())).append('=')
                    .append(encode(e.getValue()));
            }
        }
        URI uri = URI.create(base + path + (q.length() == 0 ? "" : "?" + q));
        String host = uri.getHost() + (uri.getPort() < 0 ? "" : ":" + uri.getPort());
        String stamp = ZonedDateTime.now(ZoneOffset.UTC).format(STAMP);
        HttpRequest.Builder b = HttpRequest.newBuilder(uri).timeout(Duration.ofMinutes(5))
            .header("x-amz-content-sha256", payloadHash).header("x-amz-date", stamp);
        if (exclusive) {
            b.header("If-None-Match", "*");
        }
        if (sessionToken != null) {
            b.header("x-amz-security-token", sessionToken);
        }
        if (accessKey == null) {
            return b;  // anonymous access
        }
        StringBuilder headers = new StringBuilder("host:").append(host).append('\n');
        String signed = "host";
        if (exclusive) {
            headers.append("if-none-match:*\n");
            signed += ";if-none-match";
        }
        headers.append("x-amz-content-sha256:").append(payloadHash).append('\n');
        headers.append("x-amz-date:").append(stamp).append('\n');
        signed += ";x-amz-content-sha256;x-amz-date";
        if (sessionToken != null) {
            headers.append("x-amz-security-token:").append(sessionToken).append('\n');
            signed += ";x-amz-security-token";
        }
        // the path as sent: an endpoint with a path of its own (a proxy's prefix) is signed with it
        String canonical = method + "\n" + uri.getRawPath() + "\n" + q + "\n" + headers + "\n" + signed + "\n"
            + payloadHash;
        String day = stamp.substring(0, 8);
        String scope = day + "/" + region + "/s3/aws4_request";
        String toSign = "AWS4-HMAC-SHA256\n" + stamp + "\n" + scope + "\n"
            + hex(sha256(canonical.getBytes(StandardCharsets.UTF_8)));
        byte[] k = hmac(("AWS4" + secretKey).getBytes(StandardCharsets.UTF_8), day);
        k = hmac(k, region);
        k = hmac(k, "s3");
        k = hmac(k, "aws4_request");
        String signature = hex(hmac(k, toSign));
        return b.header("Authorization", "AWS4-HMAC-SHA256 Credential=" + accessKey + "/" + scope
            + ", SignedHeaders=" + signed + ", Signature=" + signature);
    }

    /**
     * The request {@code method} on {@code key} (null: the bucket) with {@code query} would send, signed, without a
     * payload, and not sent: for tests of the addressing and signing where no store answers (AWS itself).
     */
    HttpRequest unsent(String method, String key, java.util.SortedMap<String, String> query, boolean exclusive)
            throws IOException {
        return request(method, key, query, EMPTY_SHA256, exclusive)
            .method(method, HttpRequest.BodyPublishers.noBody()).build();
    }

    /** An object key as a URI path: every byte but the unreserved characters and {@code /} percent-encoded. */
    static String encodePath(String key) {
        StringBuilder s = new StringBuilder();
        String sep = "";
        for (String segment : key.split("/", -1)) {
            s.append(sep).append(encode(segment));
            sep = "/";
        }
        return s.toString();
    }

    static String encode(String text) {
        StringBuilder s = new StringBuilder();
        for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
            char c = (char) (b & 0xff);
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'
                    || c == '.' || c == '~') {
                s.append(c);
            } else {
                s.append('%').append(Character.toUpperCase(Character.forDigit((c >> 4) & 0xf, 16)))
                    .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
            }
        }
        return s.toString();
    }

    private static byte[] hmac(byte[] key, String data) throws IOException {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
        } catch (GeneralSecurityException e) {
            throw new IOException("HmacSHA256 is not available: " + e, e);
        }
    }

    private static byte[] sha256(byte[] data) throws IOException {
        try {
            return MessageDigest.getInstance("SHA-256").digest(data);
        } catch (GeneralSecurityException e) {
            throw new IOException("SHA-256 is not available: " + e, e);
        }
    }

    private static String sha256Hex(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[1 << 16];
            for (int n; (n = in.read(buf)) > 0; ) {
                md.update(buf, 0, n);
            }
            return hex(md.digest());
        } catch (GeneralSecurityException e) {
            throw new IOException("SHA-256 is not available: " + e, e);
        }
    }

    private static String hex(byte[] b) {
        return PartCapture.hex(b);
    }

    /** The XML of a ListObjectsV2 answer, parsed with DTDs and external entities refused. */
    private static final class ListXml {
        private ListXml() {
        }

        static org.w3c.dom.Document parse(byte[] body, String what) throws IOException {
            try {
                javax.xml.parsers.DocumentBuilderFactory f = javax.xml.parsers.DocumentBuilderFactory.newInstance();
                f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
                f.setFeature(javax.xml.XMLConstants.FEATURE_SECURE_PROCESSING, true);
                f.setExpandEntityReferences(false);
                f.setNamespaceAware(false);
                return f.newDocumentBuilder().parse(new java.io.ByteArrayInputStream(body));
            } catch (javax.xml.parsers.ParserConfigurationException | org.xml.sax.SAXException e) {
                throw new IOException("the store's listing of " + what + " is not XML it can read: " + e, e);
            }
        }

        /** The texts of the {@code name} elements (those inside a {@code parent} element when it is given). */
        static java.util.List<String> texts(org.w3c.dom.Document doc, String parent, String name) {
            java.util.List<String> out = new java.util.ArrayList<>();
            org.w3c.dom.NodeList nodes = doc.getElementsByTagName(name);
            for (int i = 0; i < nodes.getLength(); i++) {
                org.w3c.dom.Node n = nodes.item(i);
                if (parent == null || (n.getParentNode() != null && parent.equals(n.getParentNode().getNodeName()))) {
                    out.add(n.getTextContent());
                }
            }
            return out;
        }
    }
}
