/*
 * eventlog._bundle_native -- the native (C) bundle codec.
 *
 * The byte layout, the id rules and the validation order are specified in schemas/BUNDLE.md and, as
 * code, in eventlog/_bundle_ref.py.  This module must agree with the reference byte for byte on encode
 * and error for error (class, byte offset and message) on decode; tests/test_bundle_property.py holds it
 * to that.
 *
 * This is a private module: eventlog/bundle.py validates and normalises the arguments (ids, types, payload
 * sources) and calls the functions below.  Even so, every function here checks every size and offset it
 * reads, from the input bytes or from its arguments, so that no input can make it read or write out of
 * bounds.  All size arithmetic is done in 64 bits on values that are at most 2**32 (u32 fields) or a
 * Py_ssize_t buffer length, so it cannot overflow.
 *
 * The GIL is released around the per-message loops once a bundle is large enough for it to pay off.  That
 * is safe because every buffer touched without the GIL is held by a Py_buffer export (which keeps its
 * object alive and, for bytearray, unresizable) or by a strong reference to an immutable bytes object.
 * Concurrent writes to a mutable input by another thread can at worst produce wrong bytes, never an
 * out-of-bounds access: each header field is read once into a local and bounds-checked before use.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BUNDLE_HEADER 32u
#define MESSAGE_HEADER 16u
#define MAGIC 0xCAFEBABAu
#define BT_EMPTY 1u
#define BT_BARRIER 2u
#define BT_BUNDLE 3u
#define MT_BARRIER 1u
#define MAX_U32 UINT64_C(0xFFFFFFFF)
#define MAX_I32 UINT64_C(0x7FFFFFFF)
#define VIEW_INLINE 12u
#define VIEW_SIZE 16u

/* Release the GIL only for work large enough that the release/reacquire cost does not matter. */
#define GIL_MIN_MESSAGES 2048u
#define GIL_MIN_BYTES (UINT64_C(1) << 18)

/* ---------------------------------------------------------------------------------------------------- */
/* Little-endian loads and stores at any alignment.                                                     */

#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

static inline uint32_t ld32(const unsigned char *p) {
#if HOST_BIG_ENDIAN
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

static inline uint64_t ld64(const unsigned char *p) {
#if HOST_BIG_ENDIAN
    return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32);
#else
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#endif
}

static inline void st32(unsigned char *p, uint32_t v) {
#if HOST_BIG_ENDIAN
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
#else
    memcpy(p, &v, 4);
#endif
}

static inline void st64(unsigned char *p, uint64_t v) {
#if HOST_BIG_ENDIAN
    st32(p, (uint32_t)v);
    st32(p + 4, (uint32_t)(v >> 32));
#else
    memcpy(p, &v, 8);
#endif
}

/* ---------------------------------------------------------------------------------------------------- */
/* Errors.  Decode problems are described by a code and numbers (so they can be recorded without the   */
/* GIL) and raised as eventlog.bundle.BundleError(message, offset=...) once the GIL is held again.  The  */
/* message texts are identical to those of eventlog/_bundle_ref.py.                                      */

enum {
    E_OK = 0,
    E_SHORT,
    E_MAGIC,
    E_BTYPE,
    E_RAW_OVER,
    E_MAX,
    E_COUNT_RAW,
    E_EMPTY_COUNT,
    E_EMPTY_RAW,
    E_NO_MESSAGES,
    E_FIRST_ID,
    E_MSG_HEADER,
    E_MSG_SIZE,
    E_MSG_ID,
    E_MSG_TYPE_DATA,
    E_MSG_TYPE_BARRIER,
    E_RAW_SUM,
    E_TRAILING,
    E_VIEW_RANGE,
};

typedef struct {
    int code;
    uint64_t offset;
    uint64_t a, b, c;
} derr_t;

static inline int set_err(derr_t *e, int code, uint64_t offset, uint64_t a, uint64_t b, uint64_t c) {
    e->code = code;
    e->offset = offset;
    e->a = a;
    e->b = b;
    e->c = c;
    return -1;
}

static PyObject *bundle_error_cls = NULL; /* eventlog._bundle_ref.BundleError, imported on first use */

static PyObject *get_bundle_error(void) {
    if (bundle_error_cls == NULL) {
        PyObject *mod = PyImport_ImportModule("eventlog._bundle_ref");
        if (mod == NULL) return NULL;
        bundle_error_cls = PyObject_GetAttrString(mod, "BundleError");
        Py_DECREF(mod);
    }
    return bundle_error_cls;
}

static void raise_bundle_error(const char *text, uint64_t offset) {
    PyObject *cls = get_bundle_error();
    if (cls == NULL) return;
    PyObject *msg = PyUnicode_FromString(text);
    PyObject *args = msg ? PyTuple_Pack(1, msg) : NULL;
    PyObject *kwargs = PyDict_New();
    PyObject *off = PyLong_FromUnsignedLongLong((unsigned long long)offset);
    PyObject *exc = NULL;
    if (args && kwargs && off && PyDict_SetItemString(kwargs, "offset", off) == 0) {
        exc = PyObject_Call(cls, args, kwargs);
    }
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    Py_XDECREF(msg);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(off);
}

#define ULL(x) ((unsigned long long)(x))

static void raise_derr(const derr_t *e) {
    char text[320];
    switch (e->code) {
    case E_SHORT:
        snprintf(text, sizeof text, "truncated bundle: %llu of the 32 header bytes present", ULL(e->a));
        break;
    case E_MAGIC:
        snprintf(text, sizeof text, "bad magic 0x%08llX (expected 0xCAFEBABA)", ULL(e->a));
        break;
    case E_BTYPE:
        snprintf(text, sizeof text, "unknown BundleType %llu", ULL(e->a));
        break;
    case E_RAW_OVER:
        snprintf(text, sizeof text, "RawBundleSize %llu exceeds the %llu bytes after the bundle header",
                 ULL(e->a), ULL(e->b));
        break;
    case E_MAX:
        snprintf(text, sizeof text, "MessageListSize %llu exceeds max_messages %llu", ULL(e->a), ULL(e->b));
        break;
    case E_COUNT_RAW:
        snprintf(text, sizeof text,
                 "MessageListSize %llu needs %llu bytes of message headers but RawBundleSize is %llu",
                 ULL(e->a), ULL(e->b), ULL(e->c));
        break;
    case E_EMPTY_COUNT:
        snprintf(text, sizeof text, "EMPTY bundle with MessageListSize %llu (must be 0)", ULL(e->a));
        break;
    case E_EMPTY_RAW:
        snprintf(text, sizeof text, "EMPTY bundle with RawBundleSize %llu (must be 0)", ULL(e->a));
        break;
    case E_NO_MESSAGES:
        snprintf(text, sizeof text, "%s bundle with no messages", e->a == BT_BARRIER ? "BARRIER" : "BUNDLE");
        break;
    case E_FIRST_ID:
        snprintf(text, sizeof text,
                 "LastMessageId %llu is smaller than MessageListSize %llu (first id would be below 1)",
                 ULL(e->a), ULL(e->b));
        break;
    case E_MSG_HEADER:
        snprintf(text, sizeof text, "message %llu: header overruns the bundle (%llu bytes left)", ULL(e->a),
                 ULL(e->b));
        break;
    case E_MSG_SIZE:
        snprintf(text, sizeof text, "message %llu: PayloadSize %llu exceeds the %llu bytes left in the bundle",
                 ULL(e->a), ULL(e->b), ULL(e->c));
        break;
    case E_MSG_ID:
        snprintf(text, sizeof text, "message %llu: MessageId %llu, expected %llu", ULL(e->a), ULL(e->b),
                 ULL(e->c));
        break;
    case E_MSG_TYPE_DATA:
        snprintf(text, sizeof text, "message %llu: MessageType %llu is not allowed in a BUNDLE bundle (need >= 2)",
                 ULL(e->a), ULL(e->b));
        break;
    case E_MSG_TYPE_BARRIER:
        snprintf(text, sizeof text, "message %llu: MessageType %llu is not allowed in a BARRIER bundle (need 1)",
                 ULL(e->a), ULL(e->b));
        break;
    case E_RAW_SUM:
        snprintf(text, sizeof text, "RawBundleSize %llu is larger than the %llu bytes of its %llu messages",
                 ULL(e->a), ULL(e->b), ULL(e->c));
        break;
    case E_TRAILING:
        snprintf(text, sizeof text, "%llu trailing bytes after the bundle", ULL(e->a));
        break;
    case E_VIEW_RANGE:
        snprintf(text, sizeof text,
                 "message %llu: payload of %llu bytes at bundle offset %llu does not fit the int32 offsets "
                 "of an Arrow binary_view (use payload(i))",
                 ULL(e->a), ULL(e->b), ULL(e->c));
        break;
    default:
        snprintf(text, sizeof text, "corrupt bundle");
        break;
    }
    raise_bundle_error(text, e->offset);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Decode.                                                                                              */

typedef struct {
    uint64_t ts, last_id;
    uint32_t count, btype, raw;
} hdr_t;

/* Checks the 32-byte header of the bundle at offset s of buf[0:len] (s <= len).  After this returns 0,
 * count <= max_messages, 16 * count <= raw <= len - s - 32, and the type-specific header rules hold, so
 * the caller may allocate 16 * count bytes (bounded by the input length). */
static int parse_header(const unsigned char *buf, uint64_t len, uint64_t s, uint64_t max_messages, hdr_t *h,
                        derr_t *e) {
    uint64_t avail = len - s;
    if (avail < BUNDLE_HEADER) return set_err(e, E_SHORT, s, avail, 0, 0);
    const unsigned char *p = buf + s;
    uint32_t magic = ld32(p);
    if (magic != MAGIC) return set_err(e, E_MAGIC, s, magic, 0, 0);
    h->ts = ld64(p + 4);
    h->last_id = ld64(p + 12);
    h->count = ld32(p + 20);
    h->btype = ld32(p + 24);
    h->raw = ld32(p + 28);
    if (h->btype < BT_EMPTY || h->btype > BT_BUNDLE) return set_err(e, E_BTYPE, s + 24, h->btype, 0, 0);
    if ((uint64_t)h->raw > avail - BUNDLE_HEADER)
        return set_err(e, E_RAW_OVER, s + 28, h->raw, avail - BUNDLE_HEADER, 0);
    if ((uint64_t)h->count > max_messages) return set_err(e, E_MAX, s + 20, h->count, max_messages, 0);
    if ((uint64_t)h->count * MESSAGE_HEADER > (uint64_t)h->raw)
        return set_err(e, E_COUNT_RAW, s + 20, h->count, (uint64_t)h->count * MESSAGE_HEADER, h->raw);
    if (h->btype == BT_EMPTY) {
        if (h->count != 0) return set_err(e, E_EMPTY_COUNT, s + 20, h->count, 0, 0);
        if (h->raw != 0) return set_err(e, E_EMPTY_RAW, s + 28, h->raw, 0, 0);
    } else {
        if (h->count == 0) return set_err(e, E_NO_MESSAGES, s + 20, h->btype, 0, 0);
        if (h->btype == BT_BUNDLE && h->last_id < (uint64_t)h->count)
            return set_err(e, E_FIRST_ID, s + 12, h->last_id, h->count, 0);
    }
    return 0;
}

/* Walks the messages of a bundle whose header passed parse_header; fills offsets (absolute payload
 * offsets in buf), lengths and types.  Every read stays inside buf[s : s + 32 + raw]. */
static int scan_messages(const unsigned char *buf, uint64_t s, const hdr_t *h, int64_t *offsets,
                         uint32_t *lengths, uint32_t *types, derr_t *e) {
    const uint64_t end = s + BUNDLE_HEADER + (uint64_t)h->raw;
    const uint64_t step = h->btype == BT_BUNDLE ? 1 : 0;
    const uint64_t first = h->last_id - (uint64_t)h->count * step + step; /* last - count + 1, or last */
    const uint32_t n = h->count;
    uint64_t p = s + BUNDLE_HEADER;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t left = end - p; /* p <= end holds throughout */
        if (left < MESSAGE_HEADER) return set_err(e, E_MSG_HEADER, p, i, left, 0);
        const unsigned char *m = buf + p;
        uint32_t size = ld32(m);
        if ((uint64_t)size > left - MESSAGE_HEADER)
            return set_err(e, E_MSG_SIZE, p, i, size, left - MESSAGE_HEADER);
        uint64_t id = ld64(m + 4);
        uint64_t expected = first + (uint64_t)i * step;
        if (id != expected) return set_err(e, E_MSG_ID, p + 4, i, id, expected);
        uint32_t t = ld32(m + 12);
        if (step) {
            if (t <= MT_BARRIER) return set_err(e, E_MSG_TYPE_DATA, p + 12, i, t, 0);
        } else if (t != MT_BARRIER) {
            return set_err(e, E_MSG_TYPE_BARRIER, p + 12, i, t, 0);
        }
        offsets[i] = (int64_t)(p + MESSAGE_HEADER);
        lengths[i] = size;
        types[i] = t;
        p += MESSAGE_HEADER + (uint64_t)size;
    }
    if (p != end) return set_err(e, E_RAW_SUM, p, h->raw, p - s - BUNDLE_HEADER, n);
    return 0;
}

PyDoc_STRVAR(decode_doc,
             "decode(buffer, start, max_messages, exact) -> (ts, last_id, count, type, raw_size, arrays)\n\n"
             "Validates and indexes the bundle at byte `start` of `buffer`.  `arrays` is a bytes object of\n"
             "16*count bytes: int64 payload offsets (absolute in buffer), then uint32 lengths, then uint32\n"
             "message types, all little-endian.  With exact=True the bundle must end the buffer.");

static PyObject *py_decode(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, max_messages;
    int exact;
    if (!PyArg_ParseTuple(args, "Onnp:decode", &obj, &start, &max_messages, &exact)) return NULL;
    if (max_messages < 0) {
        PyErr_SetString(PyExc_ValueError, "max_messages must be >= 0");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *arrays = NULL, *result = NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    uint64_t len = (uint64_t)view.len;
    if (start < 0 || (uint64_t)start > len) {
        PyErr_SetString(PyExc_ValueError, "start is outside the buffer");
        goto done;
    }
    hdr_t h;
    derr_t e = {0, 0, 0, 0, 0};
    if (parse_header(buf, len, (uint64_t)start, (uint64_t)max_messages, &h, &e) < 0) {
        raise_derr(&e);
        goto done;
    }
    /* count is bounded: 16 * count <= raw <= len - start - 32. */
    const uint64_t n = h.count;
    arrays = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 16));
    if (arrays == NULL) goto done;
    unsigned char *a = (unsigned char *)PyBytes_AS_STRING(arrays);
    int rc;
    if (n >= GIL_MIN_MESSAGES) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan_messages(buf, (uint64_t)start, &h, (int64_t *)a, (uint32_t *)(a + 8 * n),
                           (uint32_t *)(a + 12 * n), &e);
        Py_END_ALLOW_THREADS
    } else {
        rc = scan_messages(buf, (uint64_t)start, &h, (int64_t *)a, (uint32_t *)(a + 8 * n),
                           (uint32_t *)(a + 12 * n), &e);
    }
#if HOST_BIG_ENDIAN
    /* The arrays are documented as little-endian; swap them on big-endian hosts. */
    if (rc == 0) {
        for (uint64_t i = 0; i < n; i++) {
            int64_t o;
            memcpy(&o, a + 8 * i, 8);
            st64(a + 8 * i, (uint64_t)o);
            uint32_t v;
            memcpy(&v, a + 8 * n + 4 * i, 4);
            st32(a + 8 * n + 4 * i, v);
            memcpy(&v, a + 12 * n + 4 * i, 4);
            st32(a + 12 * n + 4 * i, v);
        }
    }
#endif
    if (rc < 0) {
        raise_derr(&e);
        goto done;
    }
    uint64_t end = (uint64_t)start + BUNDLE_HEADER + h.raw;
    if (exact && end != len) {
        set_err(&e, E_TRAILING, end, len - end, 0, 0);
        raise_derr(&e);
        goto done;
    }
    result = Py_BuildValue("KKkkkO", ULL(h.ts), ULL(h.last_id), (unsigned long)h.count,
                           (unsigned long)h.btype, (unsigned long)h.raw, arrays);
done:
    Py_XDECREF(arrays);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Arrow binary_view views over a decoded bundle.                                                       */

typedef struct {
    const unsigned char *buf;
    uint64_t base, n;
    const unsigned char *offsets, *lengths; /* little-endian int64 / uint32 arrays of n items */
    unsigned char *out;                     /* 16 * n bytes */
} views_job_t;

static int fill_views(const views_job_t *j, derr_t *e) {
    for (uint64_t i = 0; i < j->n; i++) {
        uint64_t off = ld64(j->offsets + 8 * i);
        uint64_t len = ld32(j->lengths + 4 * i);
        uint64_t rel = off - j->base;
        unsigned char *v = j->out + VIEW_SIZE * i;
        if (len > MAX_I32 || (len > VIEW_INLINE && rel > MAX_I32))
            return set_err(e, E_VIEW_RANGE, off - MESSAGE_HEADER, i, len, rel);
        memset(v, 0, VIEW_SIZE);
        st32(v, (uint32_t)len);
        if (len <= VIEW_INLINE) {
            memcpy(v + 4, j->buf + off, (size_t)len);
        } else {
            memcpy(v + 4, j->buf + off, 4); /* prefix */
            st32(v + 8, 0);                 /* buffer index: the bundle's bytes */
            st32(v + 12, (uint32_t)rel);
        }
    }
    return 0;
}

PyDoc_STRVAR(views_doc,
             "build_views(buffer, base, count, offsets, lengths) -> bytes\n\n"
             "Arrow binary_view views (16 bytes each) of `count` payloads given by little-endian int64\n"
             "absolute `offsets` and uint32 `lengths` (as returned by decode), with the views' offsets\n"
             "relative to byte `base` of `buffer`.  Every payload must lie inside buffer[base + 16:].");

static PyObject *py_build_views(PyObject *self, PyObject *args) {
    PyObject *obj, *offsets_obj, *lengths_obj;
    Py_ssize_t base, count;
    if (!PyArg_ParseTuple(args, "OnnOO:build_views", &obj, &base, &count, &offsets_obj, &lengths_obj))
        return NULL;
    Py_buffer view, ov, lv;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(offsets_obj, &ov, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (PyObject_GetBuffer(lengths_obj, &lv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ov);
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *out = NULL;
    uint64_t len = (uint64_t)view.len;
    if (base < 0 || (uint64_t)base > len || count < 0 || (uint64_t)count > (uint64_t)ov.len / 8 ||
        (uint64_t)count > (uint64_t)lv.len / 4) {
        PyErr_SetString(PyExc_ValueError, "build_views: bad base, count, offsets or lengths");
        goto done;
    }
    /* Every (offset, length) must lie inside buffer[base + 16:]: check before touching any byte. */
    const unsigned char *offs = (const unsigned char *)ov.buf;
    const unsigned char *lens = (const unsigned char *)lv.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t off = ld64(offs + 8 * (uint64_t)i), l = ld32(lens + 4 * (uint64_t)i);
        if (off < (uint64_t)base + MESSAGE_HEADER || off > len || l > len - off) {
            PyErr_SetString(PyExc_ValueError, "build_views: a payload lies outside the buffer");
            goto done;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)VIEW_SIZE);
    if (out == NULL) goto done;
    views_job_t j = {(const unsigned char *)view.buf, (uint64_t)base, (uint64_t)count, offs, lens,
                     (unsigned char *)PyBytes_AS_STRING(out)};
    derr_t e = {0, 0, 0, 0, 0};
    int rc;
    if ((uint64_t)count >= GIL_MIN_MESSAGES) {
        Py_BEGIN_ALLOW_THREADS
        rc = fill_views(&j, &e);
        Py_END_ALLOW_THREADS
    } else {
        rc = fill_views(&j, &e);
    }
    if (rc < 0) {
        Py_CLEAR(out);
        raise_derr(&e);
    }
done:
    PyBuffer_Release(&lv);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&view);
    return out;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Encode.                                                                                              */

typedef struct {
    const unsigned char *ptr;
    uint64_t len;
} span_t;

typedef struct {
    uint64_t first_id, id_step, ts, last_id;
    uint32_t btype, scalar_type;
    const unsigned char *types; /* NULL: every message has scalar_type; else n little-endian uint32 */
    uint64_t n, payload_bytes;  /* message count and sum of payload lengths */
    unsigned char *dst;         /* 32 + 16 n + payload_bytes writable bytes */
} enc_t;

static inline void write_bundle_header(const enc_t *c) {
    unsigned char *o = c->dst;
    st32(o, MAGIC);
    st64(o + 4, c->ts);
    st64(o + 12, c->last_id);
    st32(o + 20, (uint32_t)c->n);
    st32(o + 24, c->btype);
    st32(o + 28, (uint32_t)(c->n * MESSAGE_HEADER + c->payload_bytes));
}

/* Copies n bytes between non-overlapping buffers.  Payloads of up to 16 bytes are copied inline with two
 * overlapping fixed-size moves (a call to memcpy would cost more than the copy); longer ones go to memcpy,
 * which beat hand-written vector loops for 100-byte payloads in our measurements. */
static inline void copy_payload(unsigned char *d, const unsigned char *s, uint64_t n) {
    if (n > 16) {
        memcpy(d, s, (size_t)n);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else if (n) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

/* The per-message loop shared by the three payload sources.  NEXT(i, src, len) sets the pointer and
 * length of payload i.  Specialised for one type for every message (the common case) or a types array. */
#define ENCODE_MESSAGES(c, NEXT)                                                        \
    do {                                                                                \
        unsigned char *o_ = (c)->dst + BUNDLE_HEADER;                                   \
        uint64_t id_ = (c)->first_id;                                                   \
        const uint64_t step_ = (c)->id_step;                                            \
        if ((c)->types == NULL) {                                                       \
            const uint32_t t_ = (c)->scalar_type;                                       \
            for (uint64_t i = 0; i < (c)->n; i++, id_ += step_) {                       \
                const unsigned char *src;                                               \
                uint64_t len;                                                           \
                NEXT(i, src, len);                                                      \
                st32(o_, (uint32_t)len);                                                \
                st64(o_ + 4, id_);                                                      \
                st32(o_ + 12, t_);                                                      \
                copy_payload(o_ + MESSAGE_HEADER, src, len);                            \
                o_ += MESSAGE_HEADER + len;                                             \
            }                                                                           \
        } else {                                                                        \
            for (uint64_t i = 0; i < (c)->n; i++, id_ += step_) {                       \
                const unsigned char *src;                                               \
                uint64_t len;                                                           \
                NEXT(i, src, len);                                                      \
                st32(o_, (uint32_t)len);                                                \
                st64(o_ + 4, id_);                                                      \
                st32(o_ + 12, ld32((c)->types + 4 * i));                                \
                copy_payload(o_ + MESSAGE_HEADER, src, len);                            \
                o_ += MESSAGE_HEADER + len;                                             \
            }                                                                           \
        }                                                                               \
        write_bundle_header(c);                                                         \
    } while (0)

/* Parsed common arguments of the encode functions. */
typedef struct {
    PyObject *out_obj;
    unsigned long long first_id, id_step, ts, last_id;
    unsigned long btype;
    PyObject *types_obj;
    Py_buffer types_view; /* valid when has_types_view */
    int has_types_view;
    Py_buffer out_view; /* valid when has_out_view */
    int has_out_view;
    PyObject *out_bytes; /* the new bytes object when out_obj is None */
} encargs_t;

static void encargs_release(encargs_t *a) {
    if (a->has_types_view) PyBuffer_Release(&a->types_view);
    if (a->has_out_view) PyBuffer_Release(&a->out_view);
    a->has_types_view = a->has_out_view = 0;
    Py_CLEAR(a->out_bytes);
}

/* Sets c->types / c->scalar_type from the `types` argument: an int, or a buffer of n uint32. */
static int setup_types(encargs_t *a, enc_t *c, uint64_t n) {
    if (PyLong_Check(a->types_obj)) {
        unsigned long long t = PyLong_AsUnsignedLongLong(a->types_obj);
        if (t == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        if (t > MAX_U32) {
            PyErr_SetString(PyExc_ValueError, "message type does not fit u32");
            return -1;
        }
        c->scalar_type = (uint32_t)t;
        c->types = NULL;
        return 0;
    }
    if (PyObject_GetBuffer(a->types_obj, &a->types_view, PyBUF_SIMPLE) < 0) return -1;
    a->has_types_view = 1;
    if ((uint64_t)a->types_view.len != 4 * n) {
        PyErr_SetString(PyExc_ValueError, "types must hold one uint32 per message");
        return -1;
    }
    c->types = (const unsigned char *)a->types_view.buf;
    return 0;
}

/* Checks the size limits and gets the destination: a new bytes object, or the caller's writable buffer
 * (which must be large enough; nothing is written otherwise). */
static int setup_dst(encargs_t *a, enc_t *c) {
    uint64_t raw = c->n * MESSAGE_HEADER + c->payload_bytes; /* n, payload_bytes < 2**63: no overflow */
    if (c->n > MAX_U32 || c->payload_bytes > MAX_U32 || raw > MAX_U32) {
        PyErr_Format(PyExc_ValueError,
                     "bundle too large: RawBundleSize would be %llu bytes, the limit is 4294967295", ULL(raw));
        return -1;
    }
    uint64_t total = BUNDLE_HEADER + raw;
    c->first_id = a->first_id;
    c->id_step = a->id_step;
    c->ts = a->ts;
    c->last_id = a->last_id;
    c->btype = (uint32_t)a->btype;
    if (a->out_obj == Py_None) {
        a->out_bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (a->out_bytes == NULL) return -1;
        c->dst = (unsigned char *)PyBytes_AS_STRING(a->out_bytes);
        return 0;
    }
    if (PyObject_GetBuffer(a->out_obj, &a->out_view, PyBUF_WRITABLE) < 0) return -1;
    a->has_out_view = 1;
    if ((uint64_t)a->out_view.len < total) {
        PyErr_Format(PyExc_ValueError, "output buffer of %zd bytes is too small for the %llu-byte bundle",
                     a->out_view.len, ULL(total));
        return -1;
    }
    c->dst = (unsigned char *)a->out_view.buf;
    return 0;
}

static PyObject *encode_result(encargs_t *a, const enc_t *c) {
    if (a->out_obj == Py_None) {
        PyObject *r = a->out_bytes;
        a->out_bytes = NULL;
        return r;
    }
    return PyLong_FromUnsignedLongLong(ULL(BUNDLE_HEADER + c->n * MESSAGE_HEADER + c->payload_bytes));
}

#define ENC_FORMAT "OKKKKkO"
#define ENC_ARGS(a) \
    &(a).out_obj, &(a).first_id, &(a).id_step, &(a).ts, &(a).last_id, &(a).btype, &(a).types_obj

/* -- from a list or tuple of bytes-like objects -- */

typedef struct {
    span_t *spans;
    PyObject **refs;   /* strong references to bytes items (immutable; kept alive while GIL is released) */
    Py_buffer *views;  /* exports of the other items */
    Py_ssize_t nrefs, nviews;
} seqhold_t;

static void seqhold_release(seqhold_t *h) {
    for (Py_ssize_t i = 0; i < h->nrefs; i++) Py_DECREF(h->refs[i]);
    for (Py_ssize_t i = 0; i < h->nviews; i++) PyBuffer_Release(&h->views[i]);
    PyMem_Free(h->spans);
    PyMem_Free(h->refs);
    PyMem_Free(h->views);
    memset(h, 0, sizeof *h);
}

/* Collects (pointer, length) of every item, holding each one, and sums the lengths. */
static int seqhold_collect(PyObject *seq, seqhold_t *h, uint64_t *total) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    memset(h, 0, sizeof *h);
    *total = 0;
    if (n == 0) return 0;
    h->spans = PyMem_Malloc((size_t)n * sizeof(span_t));
    h->refs = PyMem_Malloc((size_t)n * sizeof(PyObject *));
    if (h->spans == NULL || h->refs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* A list may change size if an item's buffer export runs Python code: re-check every time. */
        if (i >= PySequence_Fast_GET_SIZE(seq)) {
            PyErr_SetString(PyExc_RuntimeError, "payload list changed size during encode");
            return -1;
        }
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (PyBytes_Check(item)) {
            Py_INCREF(item);
            h->refs[h->nrefs++] = item;
            h->spans[i].ptr = (const unsigned char *)PyBytes_AS_STRING(item);
            h->spans[i].len = (uint64_t)PyBytes_GET_SIZE(item);
        } else {
            if (h->views == NULL) {
                h->views = PyMem_Malloc((size_t)n * sizeof(Py_buffer));
                if (h->views == NULL) {
                    PyErr_NoMemory();
                    return -1;
                }
            }
            if (PyObject_GetBuffer(item, &h->views[h->nviews], PyBUF_SIMPLE) < 0) {
                PyErr_Format(PyExc_TypeError, "payload %zd: a contiguous bytes-like object is required, not '%.100s'",
                             i, Py_TYPE(item)->tp_name);
                return -1;
            }
            h->spans[i].ptr = (const unsigned char *)h->views[h->nviews].buf;
            h->spans[i].len = (uint64_t)h->views[h->nviews].len;
            h->nviews++;
        }
        *total += h->spans[i].len;
    }
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_SetString(PyExc_RuntimeError, "payload list changed size during encode");
        return -1;
    }
    return 0;
}

#define SPAN_NEXT(i, src, len) \
    do {                         \
        src = spans[i].ptr;      \
        len = spans[i].len;      \
    } while (0)

static void write_spans(const enc_t *c, const span_t *spans) { ENCODE_MESSAGES(c, SPAN_NEXT); }

PyDoc_STRVAR(encode_seq_doc,
             "encode_seq(payloads, out, first_id, id_step, ts, last_id, bundle_type, types) -> bytes | int\n\n"
             "Encodes a list or tuple of bytes-like payloads.  Message i gets id first_id + i * id_step and\n"
             "type `types` (an int) or types[i] (a buffer of little-endian uint32).  With out=None returns the\n"
             "bundle as bytes, else writes it at the start of the writable buffer `out` and returns its size.");

static PyObject *py_encode_seq(PyObject *self, PyObject *args) {
    PyObject *payloads;
    encargs_t a;
    memset(&a, 0, sizeof a);
    if (!PyArg_ParseTuple(args, "O" ENC_FORMAT ":encode_seq", &payloads, ENC_ARGS(a))) return NULL;
    if (!PyList_Check(payloads) && !PyTuple_Check(payloads)) {
        PyErr_SetString(PyExc_TypeError, "encode_seq: payloads must be a list or a tuple");
        return NULL;
    }
    seqhold_t h;
    uint64_t total = 0;
    PyObject *result = NULL;
    enc_t c;
    memset(&c, 0, sizeof c);
    if (seqhold_collect(payloads, &h, &total) < 0) goto done;
    c.n = (uint64_t)PySequence_Fast_GET_SIZE(payloads);
    c.payload_bytes = total;
    if (setup_types(&a, &c, c.n) < 0 || setup_dst(&a, &c) < 0) goto done;
    if (c.n >= GIL_MIN_MESSAGES || total >= GIL_MIN_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        write_spans(&c, h.spans);
        Py_END_ALLOW_THREADS
    } else {
        write_spans(&c, h.spans);
    }
    result = encode_result(&a, &c);
done:
    seqhold_release(&h);
    encargs_release(&a);
    return result;
}

PyDoc_STRVAR(seq_nbytes_doc, "seq_nbytes(payloads) -> int\n\nSum of the byte lengths of a list or tuple of bytes-like objects.");

static PyObject *py_seq_nbytes(PyObject *self, PyObject *payloads) {
    if (!PyList_Check(payloads) && !PyTuple_Check(payloads)) {
        PyErr_SetString(PyExc_TypeError, "seq_nbytes: payloads must be a list or a tuple");
        return NULL;
    }
    seqhold_t h;
    uint64_t total = 0;
    int rc = seqhold_collect(payloads, &h, &total);
    seqhold_release(&h);
    return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(ULL(total));
}

/* -- from an Arrow binary / large_binary array (offsets + data buffers) -- */

typedef struct {
    const unsigned char *offsets; /* (n + 1) offsets of `width` bytes, starting at the array's offset */
    int width;
    const unsigned char *data;
} offsrc_t;

static inline uint64_t off_at(const offsrc_t *s, uint64_t i) {
    return s->width == 4 ? (uint64_t)(int64_t)(int32_t)ld32(s->offsets + 4 * i) : ld64(s->offsets + 8 * i);
}

/* Offsets were validated by the caller: monotonic, inside the data buffer. */
#define OFF32_NEXT(i, src, len)                                                       \
    do {                                                                              \
        uint64_t a_ = (uint64_t)(int64_t)(int32_t)ld32(s->offsets + 4 * (i));         \
        len = (uint64_t)(int64_t)(int32_t)ld32(s->offsets + 4 * (i) + 4) - a_;        \
        src = s->data + a_;                                                           \
    } while (0)

#define OFF64_NEXT(i, src, len)                          \
    do {                                                 \
        uint64_t a_ = ld64(s->offsets + 8 * (i));        \
        len = ld64(s->offsets + 8 * (i) + 8) - a_;       \
        src = s->data + a_;                              \
    } while (0)

static void write_offsets(const enc_t *c, const offsrc_t *s) {
    if (s->width == 4)
        ENCODE_MESSAGES(c, OFF32_NEXT);
    else
        ENCODE_MESSAGES(c, OFF64_NEXT);
}

PyDoc_STRVAR(encode_offsets_doc,
             "encode_offsets(count, start, offsets, width, data, out, first_id, id_step, ts, last_id,\n"
             "               bundle_type, types) -> bytes | int\n\n"
             "Encodes `count` payloads of an Arrow binary (width 4) or large_binary (width 8) array whose\n"
             "offsets buffer and data buffer are given, starting at array index `start`.  The offsets are\n"
             "checked (monotonic, inside the data buffer) before anything is written.");

static PyObject *py_encode_offsets(PyObject *self, PyObject *args) {
    Py_ssize_t count, start;
    int width;
    PyObject *offsets_obj, *data_obj;
    encargs_t a;
    memset(&a, 0, sizeof a);
    if (!PyArg_ParseTuple(args, "nnOiO" ENC_FORMAT ":encode_offsets", &count, &start, &offsets_obj, &width,
                          &data_obj, ENC_ARGS(a)))
        return NULL;
    if (count < 0 || start < 0 || (width != 4 && width != 8)) {
        PyErr_SetString(PyExc_ValueError, "encode_offsets: bad count, start or width");
        return NULL;
    }
    Py_buffer ov, dv;
    if (PyObject_GetBuffer(offsets_obj, &ov, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(data_obj, &dv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ov);
        return NULL;
    }
    PyObject *result = NULL;
    enc_t c;
    memset(&c, 0, sizeof c);
    uint64_t n = (uint64_t)count;
    uint64_t slots = (uint64_t)ov.len / (uint64_t)width; /* division: no overflow on huge start/count */
    if ((uint64_t)start > slots || n + 1 > slots - (uint64_t)start) {
        PyErr_SetString(PyExc_ValueError, "encode_offsets: the offsets buffer is too short");
        goto done;
    }
    offsrc_t s = {(const unsigned char *)ov.buf + (uint64_t)start * (uint64_t)width, width,
                  (const unsigned char *)dv.buf};
    /* Validate every offset before writing: 0 <= o[0] <= o[1] <= ... <= o[n] <= len(data). */
    uint64_t dlen = (uint64_t)dv.len;
    for (uint64_t i = 0; i <= n; i++) {
        uint64_t o = off_at(&s, i);
        if ((int64_t)o < 0 || o > dlen || (i > 0 && o < off_at(&s, i - 1))) {
            PyErr_SetString(PyExc_ValueError, "encode_offsets: invalid offsets (not monotonic or outside the data)");
            goto done;
        }
    }
    c.n = n;
    c.payload_bytes = off_at(&s, n) - off_at(&s, 0);
    if (setup_types(&a, &c, n) < 0 || setup_dst(&a, &c) < 0) goto done;
    if (n >= GIL_MIN_MESSAGES || c.payload_bytes >= GIL_MIN_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        write_offsets(&c, &s);
        Py_END_ALLOW_THREADS
    } else {
        write_offsets(&c, &s);
    }
    result = encode_result(&a, &c);
done:
    encargs_release(&a);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&ov);
    return result;
}

/* -- from an Arrow binary_view array (views + variadic data buffers) -- */

typedef struct {
    const unsigned char *views; /* n views of 16 bytes, starting at the array's offset */
    const Py_buffer *bufs;
    Py_ssize_t nbufs;
} viewsrc_t;

/* Pointer and length of view i; views were validated by the caller. */
static inline const unsigned char *view_data(const viewsrc_t *s, uint64_t i, uint64_t *len) {
    const unsigned char *v = s->views + VIEW_SIZE * i;
    *len = ld32(v);
    if (*len <= VIEW_INLINE) return v + 4;
    uint32_t idx = ld32(v + 8), off = ld32(v + 12);
    return (const unsigned char *)s->bufs[idx].buf + off;
}

#define VIEW_NEXT(i, src, len) src = view_data(s, (i), &len)

static void write_views(const enc_t *c, const viewsrc_t *s) { ENCODE_MESSAGES(c, VIEW_NEXT); }

PyDoc_STRVAR(encode_views_doc,
             "encode_views(count, start, views, data_buffers, out, first_id, id_step, ts, last_id,\n"
             "             bundle_type, types) -> bytes | int\n\n"
             "Encodes `count` payloads of an Arrow binary_view array given its views buffer and the tuple of\n"
             "its data buffers, starting at array index `start`.  Every view is checked (length >= 0,\n"
             "buffer index and range inside its data buffer) before anything is written.");

static PyObject *py_encode_views(PyObject *self, PyObject *args) {
    Py_ssize_t count, start;
    PyObject *views_obj, *bufs_obj;
    encargs_t a;
    memset(&a, 0, sizeof a);
    if (!PyArg_ParseTuple(args, "nnOO!" ENC_FORMAT ":encode_views", &count, &start, &views_obj, &PyTuple_Type,
                          &bufs_obj, ENC_ARGS(a)))
        return NULL;
    if (count < 0 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "encode_views: bad count or start");
        return NULL;
    }
    Py_buffer vv;
    if (PyObject_GetBuffer(views_obj, &vv, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t nbufs = PyTuple_GET_SIZE(bufs_obj), got = 0;
    Py_buffer *bufs = PyMem_Malloc(sizeof(Py_buffer) * (size_t)(nbufs ? nbufs : 1));
    PyObject *result = NULL;
    enc_t c;
    memset(&c, 0, sizeof c);
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < nbufs; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs_obj, got), &bufs[got], PyBUF_SIMPLE) < 0) goto done;
    }
    uint64_t n = (uint64_t)count;
    uint64_t slots = (uint64_t)vv.len / VIEW_SIZE;
    if ((uint64_t)start > slots || n > slots - (uint64_t)start) {
        PyErr_SetString(PyExc_ValueError, "encode_views: the views buffer is too short");
        goto done;
    }
    viewsrc_t s = {(const unsigned char *)vv.buf + (uint64_t)start * VIEW_SIZE, bufs, nbufs};
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char *v = s.views + VIEW_SIZE * i;
        int32_t len = (int32_t)ld32(v);
        if (len < 0) {
            PyErr_SetString(PyExc_ValueError, "encode_views: negative view length");
            goto done;
        }
        if ((uint32_t)len > VIEW_INLINE) {
            uint32_t idx = ld32(v + 8);
            int32_t off = (int32_t)ld32(v + 12);
            if ((int64_t)idx >= (int64_t)nbufs || off < 0 ||
                (uint64_t)off + (uint64_t)len > (uint64_t)bufs[idx].len) {
                PyErr_SetString(PyExc_ValueError, "encode_views: a view points outside its data buffer");
                goto done;
            }
        }
        total += (uint64_t)len;
    }
    c.n = n;
    c.payload_bytes = total;
    if (setup_types(&a, &c, n) < 0 || setup_dst(&a, &c) < 0) goto done;
    if (n >= GIL_MIN_MESSAGES || total >= GIL_MIN_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        write_views(&c, &s);
        Py_END_ALLOW_THREADS
    } else {
        write_views(&c, &s);
    }
    result = encode_result(&a, &c);
done:
    encargs_release(&a);
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    PyBuffer_Release(&vv);
    return result;
}

/* ---------------------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"build_views", py_build_views, METH_VARARGS, views_doc},
    {"encode_seq", py_encode_seq, METH_VARARGS, encode_seq_doc},
    {"encode_offsets", py_encode_offsets, METH_VARARGS, encode_offsets_doc},
    {"encode_views", py_encode_views, METH_VARARGS, encode_views_doc},
    {"seq_nbytes", py_seq_nbytes, METH_O, seq_nbytes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "eventlog._bundle_native",
    "Native bundle codec of eventlog (private; use eventlog.bundle).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__bundle_native(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "ABI_VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
