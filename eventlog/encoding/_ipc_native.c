/*
 * The fast path of eventlog/encoding/ipc_message.py::check_record_batch_message: the same bounds-checked walk of
 * an Arrow IPC record-batch message's flatbuffer metadata, in C.
 *
 * check(data, start, max_metadata, max_rows, max_values, max_decoded, expansion) returns
 * (rows, values, decoded_bytes, end) for a message the Python check accepts, and None for any message it would
 * refuse (malformed, or over a limit): the caller then runs the Python check, which says why. Every read is
 * bounds-checked against the bytes given; every sum saturates instead of overflowing. Nothing is allocated
 * from what the message declares.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p; /* the flatbuffer (the message's metadata) */
    int64_t n;
    int bad;          /* a read fell outside, or a check failed */
} fb_t;

static uint64_t rd_le(const uint8_t *p, int size) {
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* size bytes at pos, little-endian, unsigned; sets bad (and returns 0) outside the buffer */
static uint64_t get(fb_t *fb, int64_t pos, int size) {
    if (fb->bad || pos < 0 || pos > fb->n - size) {
        fb->bad = 1;
        return 0;
    }
    return rd_le(fb->p + pos, size);
}

typedef struct {
    int64_t pos, vtable, vt_size;
    int present;
} table_t;

static table_t table_at(fb_t *fb, int64_t pos) {
    table_t t = {0, 0, 0, 0};
    int64_t soff = (int32_t)get(fb, pos, 4);
    int64_t vtable = pos - soff;
    int64_t vt_size = (int64_t)get(fb, vtable, 2);
    if (fb->bad || vt_size < 4 || vt_size % 2) {
        fb->bad = 1;
        return t;
    }
    get(fb, vtable + vt_size - 2, 2); /* the whole vtable lies inside the buffer */
    if (fb->bad) {
        return t;
    }
    t.pos = pos;
    t.vtable = vtable;
    t.vt_size = vt_size;
    t.present = 1;
    return t;
}

static int64_t ref(fb_t *fb, int64_t pos) {
    return pos + (int64_t)get(fb, pos, 4);
}

/* absolute position of field i, 0 when absent */
static int64_t field(fb_t *fb, const table_t *t, int i) {
    int64_t at = 4 + 2 * (int64_t)i;
    if (at >= t->vt_size) {
        return 0;
    }
    int64_t off = (int64_t)get(fb, t->vtable + at, 2);
    return off ? t->pos + off : 0;
}

static table_t subtable(fb_t *fb, const table_t *t, int i) {
    table_t none = {0, 0, 0, 0};
    int64_t at = field(fb, t, i);
    if (!at || fb->bad) {
        return none;
    }
    return table_at(fb, ref(fb, at));
}

/* (start, count) of vector field i of items of item_size bytes; count 0 when absent */
static void vector(fb_t *fb, const table_t *t, int i, int item_size, int64_t *start, int64_t *count) {
    *start = 0;
    *count = 0;
    int64_t at = field(fb, t, i);
    if (!at || fb->bad) {
        return;
    }
    int64_t s = ref(fb, at);
    int64_t c = (int64_t)get(fb, s, 4);
    if (fb->bad || c * item_size > fb->n - s - 4) {
        fb->bad = 1;
        return;
    }
    *start = s + 4;
    *count = c;
}

static int add_sat(int64_t *sum, int64_t x, int64_t cap) {
    if (x > cap || *sum > cap - x) {
        return 0;
    }
    *sum += x;
    return 1;
}

/*
 * The record-batch message at start of buf: its flatbuffer (*fb), its RecordBatch table (*batch), where its body
 * starts in buf (*body) and its length (*body_len). 0 when the bytes are no whole record-batch message or its
 * metadata is over max_meta bytes.
 */
static int find_batch(const uint8_t *buf, int64_t len, int64_t start, int64_t max_meta, fb_t *fb, table_t *batch,
                      int64_t *body, int64_t *body_len) {
    int64_t pos = start;
    if (pos < 0 || len - pos < 8) {
        return 0;
    }
    int64_t size = (int64_t)rd_le(buf + pos, 4);
    if (size == 0xFFFFFFFFLL) {
        pos += 4;
        size = (int64_t)rd_le(buf + pos, 4); /* in bounds: 8 bytes from start exist */
    }
    pos += 4;
    if (size > max_meta || size < 8 || size > len - pos) {
        return 0;
    }
    fb->p = buf + pos;
    fb->n = size;
    fb->bad = 0;
    table_t message = table_at(fb, ref(fb, 0));
    if (fb->bad) {
        return 0;
    }
    int64_t at = field(fb, &message, 1);
    int64_t header_type = at ? (int64_t)get(fb, at, 1) : 0;
    if (fb->bad || header_type != 3) {
        return 0;
    }
    at = field(fb, &message, 3);
    *body_len = at ? (int64_t)get(fb, at, 8) : 0;
    *body = pos + size;
    if (fb->bad || *body_len < 0 || *body_len > len - *body) {
        return 0;
    }
    *batch = subtable(fb, &message, 2);
    return !fb->bad && batch->present;
}

static PyObject *check(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    long long max_meta, max_rows, max_values, max_decoded, expansion;
    if (!PyArg_ParseTuple(args, "y*nLLLLL", &view, &start, &max_meta, &max_rows, &max_values, &max_decoded,
                          &expansion)) {
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    int64_t len = (int64_t)view.len;
    int ok = 0;
    int64_t rows = 0, values = 0, decoded = 0, end = 0;
    do {
        fb_t fb;
        table_t batch;
        int64_t body, body_len;
        if (!find_batch(buf, len, (int64_t)start, max_meta, &fb, &batch, &body, &body_len)) {
            break;
        }
        int64_t size = fb.n;
        int64_t at = field(&fb, &batch, 0);
        rows = at ? (int64_t)get(&fb, at, 8) : 0;
        if (fb.bad || rows < 0 || rows > max_rows) {
            break;
        }
        int64_t nodes_at, nodes;
        vector(&fb, &batch, 1, 16, &nodes_at, &nodes);
        if (fb.bad || nodes_at > size - 16 * nodes) {
            break;
        }
        int good = 1;
        for (int64_t i = 0; i < nodes && good; i++) {
            int64_t length = (int64_t)rd_le(fb.p + nodes_at + 16 * i, 8);
            good = length >= 0 && add_sat(&values, length, max_values);
        }
        if (!good) {
            break;
        }
        table_t compression = subtable(&fb, &batch, 3);
        if (fb.bad) {
            break;
        }
        int compressed = 0;
        if (compression.present) {
            at = field(&fb, &compression, 0);
            int64_t codec = at ? (int64_t)(int8_t)get(&fb, at, 1) : 0;
            if (fb.bad || (codec != 0 && codec != 1)) { /* CompressionType: LZ4_FRAME = 0, ZSTD = 1 */
                break;
            }
            compressed = 1;
        }
        end = body + body_len;
        int64_t stored = end - (int64_t)start;
        int64_t bound = expansion;
        if (stored > 1 && bound > max_decoded / stored) {
            bound = max_decoded;
        } else {
            bound = bound * (stored > 1 ? stored : 1);
            if (bound > max_decoded) {
                bound = max_decoded;
            }
        }
        int64_t bufs_at, nbufs;
        vector(&fb, &batch, 2, 16, &bufs_at, &nbufs);
        if (fb.bad || bufs_at > size - 16 * nbufs) {
            break;
        }
        for (int64_t i = 0; i < nbufs && good; i++) {
            int64_t offset = (int64_t)rd_le(fb.p + bufs_at + 16 * i, 8);
            int64_t length = (int64_t)rd_le(fb.p + bufs_at + 16 * i + 8, 8);
            if (offset < 0 || length < 0 || offset > body_len || length > body_len - offset) {
                good = 0;
            } else if (!compressed || length == 0) {
                good = add_sat(&decoded, length, bound);
            } else if (length < 8) {
                good = 0;
            } else {
                int64_t declared = (int64_t)rd_le(buf + body + offset, 8);
                good = declared >= -1 && add_sat(&decoded, declared == -1 ? length - 8 : declared, bound);
            }
        }
        if (!good) {
            break;
        }
        int64_t counts_at, ncounts, variadic = 0;
        vector(&fb, &batch, 4, 8, &counts_at, &ncounts);
        if (fb.bad || counts_at > size - 8 * ncounts) {
            break;
        }
        for (int64_t i = 0; i < ncounts && good; i++) {
            int64_t c = (int64_t)rd_le(fb.p + counts_at + 8 * i, 8);
            good = c >= 0 && add_sat(&variadic, c, nbufs);
        }
        if (!good) {
            break;
        }
        ok = 1;
    } while (0);
    PyBuffer_Release(&view);
    if (!ok) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LLLL)", (long long)rows, (long long)values, (long long)decoded, (long long)end);
}

/*
 * tail(data, start, nnodes, nbuffers) -> (codec, nodes, buffers) or None: the message's body compression (None
 * when uncompressed, else its CompressionType: 0 LZ4_FRAME, 1 ZSTD), the last nnodes FieldNodes
 * ((length, null_count) each) and the last nbuffers Buffers ((offset, length) each, the offset from the start of
 * data, inside the message's body) of the record-batch message at start; None when the message is malformed or
 * holds fewer. What it returns lies inside data: a caller reads those bytes without further checks.
 */
static PyObject *tail(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, want_nodes, want_bufs;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &want_nodes, &want_bufs)) {
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    int64_t len = (int64_t)view.len;
    PyObject *out = NULL;
    do {
        fb_t fb;
        table_t batch;
        int64_t body, body_len;
        if (want_nodes < 0 || want_bufs < 0 || want_nodes > 64 || want_bufs > 64
            || !find_batch(buf, len, (int64_t)start, INT64_MAX, &fb, &batch, &body, &body_len)) {
            break;
        }
        int64_t size = fb.n;
        table_t compression = subtable(&fb, &batch, 3);
        if (fb.bad) {
            break;
        }
        int64_t nodes_at, nodes, bufs_at, nbufs;
        vector(&fb, &batch, 1, 16, &nodes_at, &nodes);
        vector(&fb, &batch, 2, 16, &bufs_at, &nbufs);
        if (fb.bad || nodes < want_nodes || nbufs < want_bufs || nodes_at > size - 16 * nodes
            || bufs_at > size - 16 * nbufs) {
            break;
        }
        PyObject *node_list = PyTuple_New(want_nodes);
        PyObject *buf_list = PyTuple_New(want_bufs);
        int good = node_list != NULL && buf_list != NULL;
        for (Py_ssize_t i = 0; good && i < want_nodes; i++) {
            const uint8_t *n = fb.p + nodes_at + 16 * (nodes - want_nodes + i);
            PyObject *t = Py_BuildValue("(LL)", (long long)(int64_t)rd_le(n, 8), (long long)(int64_t)rd_le(n + 8, 8));
            good = t != NULL;
            if (good) {
                PyTuple_SET_ITEM(node_list, i, t);
            }
        }
        for (Py_ssize_t i = 0; good && i < want_bufs; i++) {
            const uint8_t *b = fb.p + bufs_at + 16 * (nbufs - want_bufs + i);
            int64_t offset = (int64_t)rd_le(b, 8), length = (int64_t)rd_le(b + 8, 8);
            if (offset < 0 || length < 0 || offset > body_len || length > body_len - offset) {
                good = 0;
                break;
            }
            PyObject *t = Py_BuildValue("(LL)", (long long)(body + offset), (long long)length);
            good = t != NULL;
            if (good) {
                PyTuple_SET_ITEM(buf_list, i, t);
            }
        }
        if (good) {
            int64_t codec = -1; /* no compression: None */
            if (compression.present) {
                int64_t at = field(&fb, &compression, 0);
                codec = at ? (int64_t)(int8_t)get(&fb, at, 1) : 0;
                good = !fb.bad;
            }
            if (good) {
                out = codec < 0 ? Py_BuildValue("(ONN)", Py_None, node_list, buf_list)
                                : Py_BuildValue("(LNN)", (long long)codec, node_list, buf_list);
            }
        }
        if (!good) { /* Py_BuildValue took both tuples, even when it failed */
            Py_XDECREF(node_list);
            Py_XDECREF(buf_list);
        }
    } while (0);
    PyBuffer_Release(&view);
    if (out == NULL && !PyErr_Occurred()) {
        Py_RETURN_NONE;
    }
    return out;
}

/* the flatbuffer string at the uoffset stored at pos, as bytes; NULL (bad set) when it lies outside */
static PyObject *fb_string(fb_t *fb, int64_t pos) {
    int64_t s = ref(fb, pos);
    int64_t n = (int64_t)get(fb, s, 4);
    if (fb->bad || n > fb->n - s - 4) {
        fb->bad = 1;
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)fb->p + s + 4, (Py_ssize_t)n);
}

/*
 * empty(data, start) -> (rows, nodes, buffers, metadata) or None: for the record-batch message at start, its row
 * count, how many FieldNodes and Buffers it has, and its custom metadata as a tuple of (key, value) bytes pairs;
 * None when it is malformed. A reader decodes an event without rows (Progress) from this alone, without
 * pyarrow (which would give the GIL away and back twice).
 */
static PyObject *empty(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n", &view, &start)) {
        return NULL;
    }
    PyObject *out = NULL, *pairs = NULL;
    do {
        fb_t fb;
        table_t batch;
        int64_t body, body_len;
        if (!find_batch((const uint8_t *)view.buf, (int64_t)view.len, (int64_t)start, INT64_MAX, &fb, &batch, &body,
                        &body_len)) {
            break;
        }
        int64_t at = field(&fb, &batch, 0);
        int64_t rows = at ? (int64_t)get(&fb, at, 8) : 0;
        int64_t nodes_at, nodes, bufs_at, nbufs;
        vector(&fb, &batch, 1, 16, &nodes_at, &nodes);
        vector(&fb, &batch, 2, 16, &bufs_at, &nbufs);
        /* the Message table again: its custom_metadata (field 4), a vector of KeyValue tables */
        table_t message = table_at(&fb, ref(&fb, 0));
        int64_t kv_at, nkv;
        vector(&fb, &message, 4, 4, &kv_at, &nkv);
        if (fb.bad || nkv > 64) {
            break;
        }
        pairs = PyTuple_New(nkv);
        if (pairs == NULL) {
            break;
        }
        int good = 1;
        for (int64_t i = 0; good && i < nkv; i++) {
            table_t kv = table_at(&fb, ref(&fb, kv_at + 4 * i));
            int64_t k_at = fb.bad ? 0 : field(&fb, &kv, 0), v_at = fb.bad ? 0 : field(&fb, &kv, 1);
            if (fb.bad || !k_at || !v_at) {
                good = 0;
                break;
            }
            PyObject *k = fb_string(&fb, k_at);
            PyObject *v = k == NULL ? NULL : fb_string(&fb, v_at);
            PyObject *pair = v == NULL ? NULL : PyTuple_Pack(2, k, v);
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (pair == NULL) {
                good = 0;
                break;
            }
            PyTuple_SET_ITEM(pairs, i, pair);
        }
        if (good) {
            out = Py_BuildValue("(LLLO)", (long long)rows, (long long)nodes, (long long)nbufs, pairs);
        }
    } while (0);
    Py_XDECREF(pairs);
    PyBuffer_Release(&view);
    if (out == NULL) {
        PyErr_Clear(); /* a string that does not fit is malformed, not an error of the call */
        Py_RETURN_NONE;
    }
    return out;
}

/* The OR of len bytes at d, folded into 8 bytes (a byte >= 0x80 anywhere sets a high bit). Built twice on x86:
 * once for any CPU, once for AVX2 (chosen at run time), as numpy does: the loop is memory-bound and twice as
 * fast with 32-byte vectors. */
#define OR_BYTES_BODY                                                                                            \
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;                                                                     \
    Py_ssize_t i = 0;                                                                                            \
    for (; i + 32 <= len; i += 32) {                                                                             \
        uint64_t w0, w1, w2, w3;                                                                                 \
        memcpy(&w0, d + i, 8);                                                                                   \
        memcpy(&w1, d + i + 8, 8);                                                                               \
        memcpy(&w2, d + i + 16, 8);                                                                              \
        memcpy(&w3, d + i + 24, 8);                                                                              \
        a0 |= w0;                                                                                                \
        a1 |= w1;                                                                                                \
        a2 |= w2;                                                                                                \
        a3 |= w3;                                                                                                \
    }                                                                                                            \
    for (; i < len; i++) {                                                                                       \
        a0 |= d[i];                                                                                              \
    }                                                                                                            \
    return a0 | a1 | a2 | a3;

static uint64_t or_bytes_any(const uint8_t *d, Py_ssize_t len) { OR_BYTES_BODY }

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t or_bytes_avx2(const uint8_t *d, Py_ssize_t len) { OR_BYTES_BODY }
#endif

static uint64_t or_bytes(const uint8_t *d, Py_ssize_t len) {
#if defined(__GNUC__) && defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        return or_bytes_avx2(d, len);
    }
#endif
    return or_bytes_any(d, len);
}

/*
 * plain_ok(offsets, data, offset, n, width, text) -> bool: whether a string or binary column of n values starting
 * at value `offset`, with `width`-byte (4 or 8) offsets in the buffer `offsets` and its bytes in `data` (None: no
 * data buffer), has offsets that start at or above 0, never decrease and end inside data, and (text) only ASCII
 * bytes between its first and last offset (ASCII is valid UTF-8). False when anything is otherwise, out of
 * bounds included: Arrow's own full validation then decides and says what is wrong. Holds the GIL: a 10k-value
 * column takes microseconds, less than handing the GIL to another thread and waiting to get it back.
 */
static PyObject *plain_ok(PyObject *self, PyObject *args) {
    Py_buffer off, data;
    PyObject *data_obj;
    Py_ssize_t offset, n;
    int width, text;
    if (!PyArg_ParseTuple(args, "y*Onnip", &off, &data_obj, &offset, &n, &width, &text)) {
        return NULL;
    }
    int ok = 1;
    data.buf = NULL;
    data.len = 0;
    int have_data = 0;
    if (data_obj != Py_None) {
        if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) != 0) {
            PyBuffer_Release(&off);
            return NULL;
        }
        have_data = 1;
    }
    do {
        if ((width != 4 && width != 8) || offset < 0 || n < 0 || offset > (PY_SSIZE_T_MAX / 8) - n - 1 ||
            (offset + n + 1) * (Py_ssize_t)width > off.len) {
            ok = 0;
            break;
        }
        const uint8_t *o = (const uint8_t *)off.buf + offset * width;
        int64_t first, prev;
        int bad = 0;
        if (width == 4) {
            int32_t a, b;
            memcpy(&a, o, 4);
            first = a;
            for (Py_ssize_t i = 1; i <= n; i++) { /* no carried value: the compiler vectorizes it */
                memcpy(&a, o + (i - 1) * 4, 4);
                memcpy(&b, o + i * 4, 4);
                bad |= b < a;
            }
            memcpy(&a, o + n * 4, 4);
            prev = a;
        } else {
            int64_t a, b;
            memcpy(&first, o, 8);
            for (Py_ssize_t i = 1; i <= n; i++) {
                memcpy(&a, o + (i - 1) * 8, 8);
                memcpy(&b, o + i * 8, 8);
                bad |= b < a;
            }
            memcpy(&prev, o + n * 8, 8);
        }
        ok = !bad && first >= 0;
        if (!ok || prev > (int64_t)data.len) {
            ok = 0;
            break;
        }
        if (text && prev > first) {
            const uint8_t *d = (const uint8_t *)data.buf + first;
            uint64_t acc = or_bytes(d, (Py_ssize_t)(prev - first));
            ok = (acc & 0x8080808080808080ULL) == 0;
        }
    } while (0);
    if (have_data) {
        PyBuffer_Release(&data);
    }
    PyBuffer_Release(&off);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS,
     "check(data, start, max_metadata, max_rows, max_values, max_decoded, expansion) -> "
     "(rows, values, decoded_bytes, end) or None: what a record-batch message declares, None when it is "
     "malformed or over a limit (the Python check says which)."},
    {"empty", empty, METH_VARARGS,
     "empty(data, start) -> (rows, nodes, buffers, metadata) or None: a record-batch message's row count, node and "
     "buffer counts and custom metadata ((key, value) bytes pairs); None when it is malformed."},
    {"tail", tail, METH_VARARGS,
     "tail(data, start, nnodes, nbuffers) -> (codec, nodes, buffers) or None: the last FieldNodes and "
     "Buffers of a record-batch message, buffers as (offset in data, length); None when it is malformed."},
    {"plain_ok", plain_ok, METH_VARARGS,
     "plain_ok(offsets, data, offset, n, width, text) -> bool: the offsets of a string or binary column ascend "
     "from 0 or more to inside data, and (text) its bytes are ASCII; False when Arrow must decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ipc_native",
    .m_doc = "Bounds-checked reading of Arrow IPC record-batch message metadata.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__ipc_native(void) {
    return PyModule_Create(&module);
}
