/* Authenticated cable datagrams in C (daemons/wire/cableauth.py is the oracle and the
 * specification): seal = body || session(8) || counter(8) || tag(16), tag = the first 16
 * bytes of HMAC-SHA256(k_dir, body || session || counter), big-endian numbers.
 *
 * HMAC-SHA256 is libcrypto's (OpenSSL 3's EVP_MAC "HMAC"), the construction the README
 * names byte for byte;
 * it uses the CPU's SHA extensions where there are some, which a SHA-256 written here would
 * not (README "Authenticated cables" says why the build links -lcrypto).
 *
 * The type daemons._link.CableAuthCore holds one end's state: both subkeys (derived in
 * Python), the session and next counter it seals with, and the replay window of the
 * peer's (session, counter) pairs: a ring of `window` bits indexed by counter % window,
 * which accepts exactly what cableauth.ReplayWindow's shifted bitmap accepts.  gsnd's
 * Python transport and its data plane (rx_pump, through Core.dp_auth) share one object,
 * so both paths seal with one counter and open against one window.
 *
 * Counting: `open` (the Python path) returns the reason and leaves counting to the caller
 * (cableauth.CompiledCableAuth counts into the transport's counters, as CableAuth does);
 * the data plane counts its own opens here (`dp_counts`), merged into the "cable" group.
 */
#ifndef GSN_CABLEAUTH_H
#define GSN_CABLEAUTH_H

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define CA_KEY 32
#define CA_TAG 16
#define CA_IDS 16
#define CA_TRAILER (CA_IDS + CA_TAG)
#define CA_SHIM 32
#define CA_MP 40

/* the outcomes of an open, in the oracle's order of checks */
#define CA_REASONS(X)                                                                          \
    X(OK, "ok") X(UNAUTH, "unauthenticated") X(TRUNC, "truncated") X(BAD_MAC, "bad_mac")      \
    X(REFLECTED, "reflected") X(OLD_SESSION, "old_session") X(REPLAYED, "replayed")          \
    X(TOO_OLD, "too_old")
#define CA_ENUM(id, name) CA_##id,
#define CA_NAME(id, name) name,
enum { CA_REASONS(CA_ENUM) CA_N };
static const char *ca_names[CA_N] = {CA_REASONS(CA_NAME)};

typedef struct {
    PyObject_HEAD
    EVP_MAC_CTX *tx, *rx;      /* HMAC-SHA256 keyed with each direction's subkey */
    uint64_t session, counter; /* ours: the next datagram's counter */
    int have;                  /* a peer session has been accepted */
    uint64_t peer_session, top;
    uint64_t window;           /* bits in the ring */
    uint64_t *ring;
    uint64_t dp_counts[CA_N];  /* the data plane's opens */
    uint64_t dp_sealed;        /* datagrams the data plane sealed (_loopseal.h) */
} CableAuthCore;

/* The tag with a keyed context (EVP_MAC "HMAC", SHA-256): re-initialised with a NULL
 * key, it keeps the key's inner and outer pads, so a datagram costs its own hashing only
 * (the one-shot HMAC() fetches the algorithm and pads the key on every call).  Returns
 * -1 if libcrypto fails (then nothing matches and nothing is sent). */
static int ca_tag(EVP_MAC_CTX *ctx, const uint8_t *data, size_t len, uint8_t out[CA_TAG])
{
    uint8_t md[EVP_MAX_MD_SIZE];
    size_t mdlen = 0;
    if (!EVP_MAC_init(ctx, NULL, 0, NULL) || !EVP_MAC_update(ctx, data, len)
        || !EVP_MAC_final(ctx, md, &mdlen, sizeof md) || mdlen < CA_TAG)
        return -1;
    memcpy(out, md, CA_TAG);
    return 0;
}

static EVP_MAC_CTX *ca_keyed(const uint8_t *key)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds its own reference */
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0), OSSL_PARAM_construct_end()};
    if (ctx && !EVP_MAC_init(ctx, key, CA_KEY, params)) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

static inline int ca_bit(CableAuthCore *a, uint64_t c) { return (int)((a->ring[(c % a->window) >> 6] >> (c % a->window & 63)) & 1); }
static inline void ca_set(CableAuthCore *a, uint64_t c) { a->ring[(c % a->window) >> 6] |= 1ull << (c % a->window & 63); }
static inline void ca_clear(CableAuthCore *a, uint64_t c) { a->ring[(c % a->window) >> 6] &= ~(1ull << (c % a->window & 63)); }

/* cableauth.ReplayWindow.check: record (session, counter) and return CA_OK, or why not. */
static int ca_window(CableAuthCore *a, uint64_t session, uint64_t counter)
{
    size_t words = (size_t)((a->window + 63) / 64);
    if (!a->have || session > a->peer_session) {
        a->have = 1, a->peer_session = session, a->top = counter;
        memset(a->ring, 0, words * 8);
        ca_set(a, counter);
        return CA_OK;
    }
    if (session < a->peer_session)
        return CA_OLD_SESSION;
    if (counter > a->top) {
        uint64_t ahead = counter - a->top;
        if (ahead >= a->window)
            memset(a->ring, 0, words * 8);
        else
            for (uint64_t c = a->top + 1; c != counter; c++) /* the skipped counters: not seen */
                ca_clear(a, c);
        ca_clear(a, counter);
        ca_set(a, counter);
        a->top = counter;
        return CA_OK;
    }
    if (a->top - counter >= a->window)
        return CA_TOO_OLD;
    if (ca_bit(a, counter))
        return CA_REPLAYED;
    ca_set(a, counter);
    return CA_OK;
}

/* Open datagram d[0:n]: CA_OK and *body the link's datagram's length, or the reason. */
static int ca_open(CableAuthCore *a, const uint8_t *d, Py_ssize_t n, Py_ssize_t *body)
{
    if (n % CA_MP == CA_SHIM % CA_MP)
        return CA_UNAUTH;
    if (n < CA_SHIM + CA_MP + CA_TRAILER || (n - CA_TRAILER - CA_SHIM) % CA_MP)
        return CA_TRUNC;
    uint8_t t[CA_TAG];
    if (ca_tag(a->rx, d, (size_t)(n - CA_TAG), t) < 0 || CRYPTO_memcmp(t, d + n - CA_TAG, CA_TAG)) {
        if (ca_tag(a->tx, d, (size_t)(n - CA_TAG), t) < 0)
            return CA_BAD_MAC;
        return CRYPTO_memcmp(t, d + n - CA_TAG, CA_TAG) ? CA_BAD_MAC : CA_REFLECTED;
    }
    int why = ca_window(a, load_be64(d + n - CA_TRAILER), load_be64(d + n - CA_TRAILER + 8));
    if (why == CA_OK)
        *body = n - CA_TRAILER;
    return why;
}

/* The data plane's open (rx_pump): the body's length, or -1 (dropped, counted). */
static Py_ssize_t ca_open_dp(PyObject *auth, const uint8_t *d, Py_ssize_t n)
{
    CableAuthCore *a = (CableAuthCore *)auth;
    Py_ssize_t body = -1;
    int why = ca_open(a, d, n, &body);
    a->dp_counts[why]++;
    return why == CA_OK ? body : -1;
}

/* --- the Python type ---------------------------------------------------------------- */

static int CableAuthCore_init(CableAuthCore *a, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tx_key", "rx_key", "session", "window", NULL};
    Py_buffer tx, rx;
    unsigned long long session;
    long long window;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*y*KL:CableAuthCore", kwlist, &tx, &rx, &session, &window))
        return -1;
    int bad = tx.len != CA_KEY || rx.len != CA_KEY;
    if (!bad && window >= 1 && window <= (1 << 20)) {
        EVP_MAC_CTX_free(a->tx);
        EVP_MAC_CTX_free(a->rx);
        a->tx = ca_keyed(tx.buf), a->rx = ca_keyed(rx.buf);
    }
    PyBuffer_Release(&tx);
    PyBuffer_Release(&rx);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "CableAuthCore: subkeys are 32 bytes");
        return -1;
    }
    if (window < 1 || window > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "CableAuthCore: window is 1 .. 2**20 datagrams");
        return -1;
    }
    if (!a->tx || !a->rx) {
        PyErr_SetString(PyExc_RuntimeError, "CableAuthCore: libcrypto has no HMAC-SHA256");
        return -1;
    }
    PyMem_Free(a->ring);
    if (!(a->ring = PyMem_Calloc((size_t)(window + 63) / 64, 8))) {
        PyErr_NoMemory();
        return -1;
    }
    a->window = (uint64_t)window, a->session = session, a->counter = 0, a->have = 0;
    memset(a->dp_counts, 0, sizeof a->dp_counts);
    a->dp_sealed = 0;
    return 0;
}

static void CableAuthCore_dealloc(CableAuthCore *a)
{
    EVP_MAC_CTX_free(a->tx);
    EVP_MAC_CTX_free(a->rx);
    PyMem_Free(a->ring);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

#define CA_READY(a)                                                                  \
    if (!(a)->ring)                                                                  \
        return PyErr_Format(PyExc_RuntimeError, "CableAuthCore.__init__ was not called");

/* body || session || counter || tag as a new bytes object; the counter advances. */
static PyObject *ca_seal_one(CableAuthCore *a, const uint8_t *body, Py_ssize_t len)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, len + CA_TRAILER);
    if (!out)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(o, body, (size_t)len);
    store_be64(o + len, a->session);
    store_be64(o + len + 8, a->counter++);
    if (ca_tag(a->tx, o, (size_t)(len + CA_IDS), o + len + CA_IDS) < 0) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_RuntimeError, "libcrypto's HMAC-SHA256 failed");
    }
    return out;
}

static PyObject *CableAuthCore_seal(CableAuthCore *a, PyObject *arg)
{
    CA_READY(a);
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = ca_seal_one(a, b.buf, b.len);
    PyBuffer_Release(&b);
    return out;
}

static PyObject *CableAuthCore_seal_many(CableAuthCore *a, PyObject *arg)
{
    CA_READY(a);
    if (!PyList_Check(arg))
        return PyErr_Format(PyExc_TypeError, "seal_many(list of datagrams)");
    Py_ssize_t n = PyList_GET_SIZE(arg);
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer b;
        if (PyObject_GetBuffer(PyList_GET_ITEM(arg, i), &b, PyBUF_SIMPLE) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *s = ca_seal_one(a, b.buf, b.len);
        PyBuffer_Release(&b);
        if (!s) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, s);
    }
    return out;
}

/* The link's datagram (bytes), or the reason it is refused (str, not counted). */
static PyObject *CableAuthCore_open(CableAuthCore *a, PyObject *arg)
{
    CA_READY(a);
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t body = 0;
    int why = ca_open(a, b.buf, b.len, &body);
    PyObject *out = why == CA_OK ? PyBytes_FromStringAndSize(b.buf, body) : PyUnicode_FromString(ca_names[why]);
    PyBuffer_Release(&b);
    return out;
}

static PyObject *CableAuthCore_dp_counts(CableAuthCore *a, PyObject *Py_UNUSED(ignored))
{
    CA_READY(a);
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < CA_N; i++) {
        if (!a->dp_counts[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(a->dp_counts[i]);
        char name[40];
        snprintf(name, sizeof name, "rx_auth_%s", ca_names[i]);
        if (!v || PyDict_SetItemString(out, name, v) < 0)
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    if (out && a->dp_sealed) {
        PyObject *v = PyLong_FromUnsignedLongLong(a->dp_sealed);
        if (!v || PyDict_SetItemString(out, "tx_auth_sealed_dp", v) < 0)
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
}

static PyObject *CableAuthCore_get_counter(CableAuthCore *a, void *c) { return PyLong_FromUnsignedLongLong(a->counter); }
static PyObject *CableAuthCore_get_session(CableAuthCore *a, void *c) { return PyLong_FromUnsignedLongLong(a->session); }

static PyMethodDef CableAuthCore_methods[] = {
    {"seal", (PyCFunction)CableAuthCore_seal, METH_O, "seal(body) -> sealed bytes (the next counter)"},
    {"seal_many", (PyCFunction)CableAuthCore_seal_many, METH_O, "seal_many(list) -> list of sealed bytes"},
    {"open", (PyCFunction)CableAuthCore_open, METH_O, "open(datagram) -> body bytes, or the reason (str)"},
    {"dp_counts", (PyCFunction)CableAuthCore_dp_counts, METH_NOARGS, "{rx_auth_<reason>: n, tx_auth_sealed_dp: n} of the data plane"},
    {NULL},
};

static PyGetSetDef CableAuthCore_getset[] = {
    {"counter", (getter)CableAuthCore_get_counter, NULL, "the next datagram's counter", NULL},
    {"session", (getter)CableAuthCore_get_session, NULL, "this end's session", NULL},
    {NULL},
};

static PyTypeObject CableAuthCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "daemons._link.CableAuthCore",
    .tp_basicsize = sizeof(CableAuthCore),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One end of a keyed cable in C (daemons.wire.cableauth.CompiledCableAuth).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)CableAuthCore_init,
    .tp_dealloc = (destructor)CableAuthCore_dealloc,
    .tp_methods = CableAuthCore_methods,
    .tp_getset = CableAuthCore_getset,
};

/* Core.dp_auth(core or None): the data plane opens what rx_pump receives with it. */
static PyObject *Core_dp_auth(Core *s, PyObject *arg)
{
    READY(s, NULL);
    if (!s->dp)
        return PyErr_Format(PyExc_RuntimeError, "the data plane is not attached");
    if (arg != Py_None && !PyObject_TypeCheck(arg, &CableAuthCoreType))
        return PyErr_Format(PyExc_TypeError, "dp_auth(CableAuthCore or None)");
    if (arg != Py_None && !((CableAuthCore *)arg)->ring)
        return PyErr_Format(PyExc_RuntimeError, "CableAuthCore.__init__ was not called");
    Py_XINCREF(arg == Py_None ? NULL : arg);
    Py_XSETREF(s->dp->auth, arg == Py_None ? NULL : arg);
    Py_RETURN_NONE;
}

#define CABLEAUTH_METHODS                                                                                   \
    {"dp_auth", (PyCFunction)Core_dp_auth, METH_O, "dp_auth(CableAuthCore or None): open received datagrams"},

#endif
