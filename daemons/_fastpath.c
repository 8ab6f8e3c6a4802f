/* Compiled data-plane kernels for GSN micropackets (DESIGN §4, layer 1).
 *
 * Every entry works on caller-owned buffers through the buffer protocol
 * (bytes, bytearray, memoryview, C-contiguous numpy arrays), creates no Python
 * object per micropacket, and releases the GIL around loops over enough
 * micropackets to be worth it.  Wire format (spec §1.2, daemons/constants.py):
 * 32 data bytes, then the 64-bit big-endian control word
 *
 *   VC 63..62 | TYPE 61..58 | TAIL 57 | ERROR 56 | VCR 55..54 | CR 53..48 |
 *   RSEQ 47..40 | TSEQ 39..32 | ECRC 31..16 | LCRC 15..0
 *
 * CRC-16/IBM-3740 (poly 0x1021, init 0xFFFF, unreflected, xorout 0).
 * LCRC = CRC(data[0..31] + ctrl bytes 0..5); ECRC = running CRC of the data
 * areas of a Message from 0xFFFF, stored after each micropacket.
 *
 * CRCs use slicing-by-16 tables: T[k][v] is the zero-init CRC of byte v
 * followed by k zero bytes.  With a zero initial value the CRC is linear, so a
 * 32-byte block's zero-init CRC b is computed once and both CRCs are derived:
 *   ECRC(k) = M32(ECRC(k-1)) ^ b,   LCRC = M6(M32(0xFFFF) ^ b) ^ crc0(ctrl6)
 * where Mn = "advance the register over n zero bytes" (a 16-bit linear map,
 * applied as two 256-entry tables).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_gsncrc.h"

/* --- buffer helpers ------------------------------------------------------ */

/* A C-contiguous buffer of whole micropackets. */
static int get_mps(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t *n)
{
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len % MP_BYTES) {
        PyErr_Format(PyExc_ValueError, "buffer of %zd bytes is not a whole number of %d-byte micropackets",
                     view->len, MP_BYTES);
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / MP_BYTES;
    return 0;
}

static int overlaps(const void *a, Py_ssize_t alen, const void *b, Py_ssize_t blen)
{
    const char *x = a, *y = b;
    return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

/* --- entries ---------------------------------------------------------------- */

PyDoc_STRVAR(crc16_doc, "crc16(buf, init=0xFFFF) -> int\n\nCRC-16/IBM-3740 of a buffer (slicing-by-16).");

static PyObject *fp_crc16(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "init", NULL};
    Py_buffer b;
    int init = CRC_INIT;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|i:crc16", kwlist, &b, &init))
        return NULL;
    if (init < 0 || init > 0xFFFF) {
        PyBuffer_Release(&b);
        return PyErr_Format(PyExc_ValueError, "init %d does not fit in 16 bits", init);
    }
    uint16_t c;
    if (b.len >= 4096) {
        Py_BEGIN_ALLOW_THREADS
        c = crc16_buf((uint16_t)init, b.buf, b.len);
        Py_END_ALLOW_THREADS
    } else {
        c = crc16_buf((uint16_t)init, b.buf, b.len);
    }
    PyBuffer_Release(&b);
    return PyLong_FromLong(c);
}

PyDoc_STRVAR(lcrc_check_doc,
             "lcrc_check(mps, ok=None[, blocks]) -> int\n\n"
             "Check the LCRC of every micropacket of ``mps`` (n*40 bytes) individually and return\n"
             "how many are bad.  If ``ok`` (a writable buffer of at least n bytes) is given,\n"
             "ok[i] is set to 1 for a good micropacket and 0 for a bad one.  If ``blocks`` (a\n"
             "writable buffer of at least 2n bytes) is given, blocks[i] (native uint16) is set to\n"
             "the zero-init CRC of micropacket i's data, which the receive path's ECRC check uses.");

static PyObject *fp_lcrc_check(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mps", "ok", "blocks", NULL};
    PyObject *mobj, *okobj = Py_None;
    Py_buffer m, o = {0}, bl = {0};
    Py_ssize_t n, bad = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Ow*:lcrc_check", kwlist, &mobj, &okobj, &bl))
        return NULL;
    const int blocks = bl.obj != NULL; /* bl is released on every path below (a zeroed view: a no-op) */
    uint8_t *blp = bl.buf;
    if (get_mps(mobj, &m, 0, &n) < 0) {
        PyBuffer_Release(&bl);
        return NULL;
    }
    if (blocks && (bl.len < 2 * n || overlaps(bl.buf, bl.len, m.buf, m.len))) {
        PyErr_Format(PyExc_ValueError, "blocks buffer of %zd bytes is shorter than 2 x %zd micropackets or overlaps them",
                     bl.len, n);
        PyBuffer_Release(&bl);
        PyBuffer_Release(&m);
        return NULL;
    }
    uint8_t *okp = NULL;
    if (okobj != Py_None) {
        if (PyObject_GetBuffer(okobj, &o, PyBUF_WRITABLE) < 0) {
            PyBuffer_Release(&bl);
            PyBuffer_Release(&m);
            return NULL;
        }
        if (o.len < n || overlaps(o.buf, n, m.buf, m.len) || (blocks && overlaps(o.buf, n, bl.buf, bl.len))) {
            PyErr_Format(PyExc_ValueError, "ok buffer of %zd bytes is shorter than %zd micropackets or overlaps them",
                         o.len, n);
            PyBuffer_Release(&o);
            PyBuffer_Release(&bl);
            PyBuffer_Release(&m);
            return NULL;
        }
        okp = o.buf;
    }
    const uint8_t *p = m.buf;
    PyThreadState *ts = n >= GIL_MIN_MPS ? PyEval_SaveThread() : NULL;
    uint16_t bs[ENC_CHUNK];
    uint8_t good[ENC_CHUNK];
    for (Py_ssize_t i = 0; i < n; i += ENC_CHUNK, p += ENC_CHUNK * MP_BYTES) {
        const Py_ssize_t k = n - i < ENC_CHUNK ? n - i : ENC_CHUNK;
        bad += lcrc_scan(p, k, bs, good); /* the link's receive check (_crcvec.h) */
        if (okp)
            memcpy(okp + i, good, (size_t)k);
        if (blocks)
            memcpy(blp + 2 * i, bs, 2 * (size_t)k);
    }
    if (ts)
        PyEval_RestoreThread(ts);
    if (okp)
        PyBuffer_Release(&o);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&m);
    return PyLong_FromSsize_t(bad);
}

PyDoc_STRVAR(stamp_doc,
             "stamp(mps, rseq, tseq=-1, grants=b'') -> None\n\n"
             "Set link fields of every micropacket of the writable buffer ``mps`` in place and\n"
             "fix LCRC by linearity (LCRC ^= crc0(old ctrl6 ^ new ctrl6), so a micropacket that\n"
             "was already corrupt stays detectably corrupt).  RSEQ := rseq on all.  If tseq >= 0,\n"
             "VCR/CR/TSEQ are rewritten too: TSEQ = (tseq + i) mod 256, and micropacket i <\n"
             "len(grants)//2 carries VCR = grants[2i], CR = grants[2i+1] (others 0).  With\n"
             "tseq = -1 only RSEQ changes (retransmission).");

static PyObject *fp_stamp(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mps", "rseq", "tseq", "grants", NULL};
    PyObject *mobj;
    int rseq, tseq = -1;
    Py_buffer m, g = {0};
    Py_ssize_t n;
    g.buf = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|iy*:stamp", kwlist, &mobj, &rseq, &tseq, &g))
        return NULL;
    PyObject *ret = NULL;
    if (rseq < 0 || rseq > 255) {
        PyErr_Format(PyExc_ValueError, "rseq %d out of range 0..255", rseq);
        goto out_g;
    }
    if (tseq < -1 || tseq > 255) {
        PyErr_Format(PyExc_ValueError, "tseq %d out of range -1..255", tseq);
        goto out_g;
    }
    const uint8_t *gp = g.buf;
    Py_ssize_t ng = g.buf ? g.len : 0;
    if (ng % 2) {
        PyErr_SetString(PyExc_ValueError, "grants must hold (VCR, CR) byte pairs");
        goto out_g;
    }
    ng /= 2;
    if (ng && tseq < 0) {
        PyErr_SetString(PyExc_ValueError, "grants need tseq");
        goto out_g;
    }
    for (Py_ssize_t i = 0; i < ng; i++)
        if (gp[2 * i] > 3 || gp[2 * i + 1] > 63) {
            PyErr_Format(PyExc_ValueError, "grant %zd (VCR %d, CR %d) out of range", i, gp[2 * i], gp[2 * i + 1]);
            goto out_g;
        }
    if (get_mps(mobj, &m, 1, &n) < 0)
        goto out_g;
    if (ng > n) {
        PyErr_Format(PyExc_ValueError, "%zd grants for %zd micropackets", ng, n);
        goto out_m;
    }
    {
        uint8_t *p = m.buf;
        const uint64_t r = (uint64_t)rseq << 40;
        PyThreadState *ts = n >= GIL_MIN_MPS ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < n; i++, p += MP_BYTES) {
            uint64_t old = load_be64(p + MP_DATA), neu;
            if (tseq >= 0) {
                neu = (old & ~LINK_BITS) | r | ((uint64_t)((tseq + i) & 0xFF) << 32);
                if (i < ng)
                    neu |= ((uint64_t)gp[2 * i] << 54) | ((uint64_t)gp[2 * i + 1] << 48);
            } else {
                neu = (old & ~RSEQ_BITS) | r;
            }
            uint16_t lcrc = (uint16_t)old ^ ctrl6_crc0(old ^ neu);
            store_be64(p + MP_DATA, (neu & ~0xFFFFull) | lcrc);
        }
        if (ts)
            PyEval_RestoreThread(ts);
    }
    Py_INCREF(Py_None);
    ret = Py_None;
out_m:
    PyBuffer_Release(&m);
out_g:
    if (g.buf)
        PyBuffer_Release(&g);
    return ret;
}

PyDoc_STRVAR(encode_doc,
             "encode(head, payload, out, vc, first_type=2) -> int\n\n"
             "Split the stream head + payload (zero-filled to a multiple of 32 bytes) into n\n"
             "micropackets written to out[0:40n]: TYPE first_type then DATA, TAIL on the last,\n"
             "ECRC running from 0xFFFF, LCRC set, link fields zero.  One CRC pass per 32-byte\n"
             "block.  Returns n.  Same result as message.stream_records_numpy.");

static PyObject *fp_encode(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"head", "payload", "out", "vc", "first_type", NULL};
    Py_buffer h, pl, o;
    int vc, first_type = 2;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*y*w*i|i:encode", kwlist, &h, &pl, &o, &vc, &first_type))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t total = h.len + pl.len, n = (total + MP_DATA - 1) / MP_DATA;
    if (vc < 0 || vc > 3) {
        PyErr_Format(PyExc_ValueError, "VC %d out of range 0..3", vc);
        goto out;
    }
    if (first_type < 0 || first_type > 15) {
        PyErr_Format(PyExc_ValueError, "type %d out of range 0..15", first_type);
        goto out;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "empty Message");
        goto out;
    }
    if (o.len < n * MP_BYTES) {
        PyErr_Format(PyExc_ValueError, "out buffer of %zd bytes is shorter than %zd micropackets", o.len, n);
        goto out;
    }
    if (overlaps(o.buf, n * MP_BYTES, h.buf, h.len) || overlaps(o.buf, n * MP_BYTES, pl.buf, pl.len)) {
        PyErr_SetString(PyExc_ValueError, "out overlaps the input");
        goto out;
    }
    {
        PyThreadState *ts = n >= GIL_MIN_MPS ? PyEval_SaveThread() : NULL;
        encode_mps(h.buf, h.len, pl.buf, pl.len, o.buf, n, vc, first_type);
        if (ts)
            PyEval_RestoreThread(ts);
    }
    ret = PyLong_FromSsize_t(n);
out:
    PyBuffer_Release(&o);
    PyBuffer_Release(&pl);
    PyBuffer_Release(&h);
    return ret;
}

PyDoc_STRVAR(ecrc_check_doc,
             "ecrc_check(mps, init=0xFFFF) -> int\n\n"
             "Run the ECRC register from ``init`` over the data of every micropacket of ``mps``\n"
             "and compare it with each stored ECRC.  Returns the index of the first micropacket\n"
             "whose ECRC does not match, or -1 when all match (exact: no fold).");

static PyObject *fp_ecrc_check(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mps", "init", NULL};
    PyObject *mobj;
    int init = CRC_INIT;
    Py_buffer m;
    Py_ssize_t n, first_bad = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i:ecrc_check", kwlist, &mobj, &init))
        return NULL;
    if (init < 0 || init > 0xFFFF)
        return PyErr_Format(PyExc_ValueError, "init %d does not fit in 16 bits", init);
    if (get_mps(mobj, &m, 0, &n) < 0)
        return NULL;
    const uint8_t *p = m.buf;
    uint16_t r = (uint16_t)init;
    PyThreadState *ts = n >= GIL_MIN_MPS ? PyEval_SaveThread() : NULL;
    uint16_t bs[ENC_CHUNK];
    for (Py_ssize_t i = 0; i < n; i++, p += MP_BYTES) {
        if (i % ENC_CHUNK == 0)
            block_crcs(p, MP_BYTES, n - i < ENC_CHUNK ? n - i : ENC_CHUNK, bs);
        r = adv32(r) ^ bs[i % ENC_CHUNK];
        if (r != (uint16_t)(load_be64(p + MP_DATA) >> 16)) {
            first_bad = i;
            break;
        }
    }
    if (ts)
        PyEval_RestoreThread(ts);
    PyBuffer_Release(&m);
    return PyLong_FromSsize_t(first_bad);
}

PyDoc_STRVAR(deinterleave_doc,
             "deinterleave(mps, out, offset=0) -> int\n\n"
             "Copy the 32 data bytes of every micropacket of ``mps`` back to back into the\n"
             "writable buffer ``out`` at ``offset``.  Returns the number of bytes written.");

static PyObject *fp_deinterleave(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mps", "out", "offset", NULL};
    PyObject *mobj;
    Py_buffer m, o;
    Py_ssize_t n, offset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Ow*|n:deinterleave", kwlist, &mobj, &o, &offset))
        return NULL;
    if (get_mps(mobj, &m, 0, &n) < 0) {
        PyBuffer_Release(&o);
        return NULL;
    }
    PyObject *ret = NULL;
    if (offset < 0 || offset > o.len || o.len - offset < n * MP_DATA) {
        PyErr_Format(PyExc_ValueError, "%zd micropackets do not fit at offset %zd of a %zd-byte buffer", n, offset,
                     o.len);
    } else if (overlaps((uint8_t *)o.buf + offset, n * MP_DATA, m.buf, m.len)) {
        PyErr_SetString(PyExc_ValueError, "out overlaps the input");
    } else {
        const uint8_t *p = m.buf;
        uint8_t *q = (uint8_t *)o.buf + offset;
        PyThreadState *ts = n >= GIL_MIN_MPS ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < n; i++, p += MP_BYTES, q += MP_DATA)
            memcpy(q, p, MP_DATA);
        if (ts)
            PyEval_RestoreThread(ts);
        ret = PyLong_FromSsize_t(n * MP_DATA);
    }
    PyBuffer_Release(&m);
    PyBuffer_Release(&o);
    return ret;
}

static PyObject *fp_crc_impl(PyObject *self, PyObject *args)
{
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z:crc_impl", &name))
        return NULL;
    return PyUnicode_FromString(crc_use(name));
}

static PyMethodDef methods[] = {
    {"crc_impl", fp_crc_impl, METH_VARARGS,
     "crc_impl(name=None) -> the block CRC in use: 'vpclmul' (AVX-512 VPCLMULQDQ, four blocks at a time), "
     "'clmul' (PCLMULQDQ), when the CPU has them, or 'tables'"},
    {"crc16", (PyCFunction)(void (*)(void))fp_crc16, METH_VARARGS | METH_KEYWORDS, crc16_doc},
    {"lcrc_check", (PyCFunction)(void (*)(void))fp_lcrc_check, METH_VARARGS | METH_KEYWORDS, lcrc_check_doc},
    {"stamp", (PyCFunction)(void (*)(void))fp_stamp, METH_VARARGS | METH_KEYWORDS, stamp_doc},
    {"encode", (PyCFunction)(void (*)(void))fp_encode, METH_VARARGS | METH_KEYWORDS, encode_doc},
    {"ecrc_check", (PyCFunction)(void (*)(void))fp_ecrc_check, METH_VARARGS | METH_KEYWORDS, ecrc_check_doc},
    {"deinterleave", (PyCFunction)(void (*)(void))fp_deinterleave, METH_VARARGS | METH_KEYWORDS,
     deinterleave_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "daemons._fastpath",
    "Compiled GSN data-plane kernels: CRC-16, LCRC check, link stamping, Message encode, ECRC check, "
    "de-interleave.  The numpy functions in daemons.wire are their test oracle.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    init_tables();
    PyObject *mod = PyModule_Create(&module);
    if (mod && (PyModule_AddIntConstant(mod, "MP_BYTES", MP_BYTES) < 0 ||
                PyModule_AddIntConstant(mod, "MP_DATA_BYTES", MP_DATA) < 0)) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
