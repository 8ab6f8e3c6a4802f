/* A whole Message queued from its fields, in C: the ULP socket's SENDs (and every other
 * Message gsnd originates) take the fused encode the TAP pump uses (copy + ECRC + LCRC in
 * one pass per 32-byte block, _gsncrc.h) straight into the VC's queue, as a PyMem block:
 * no padded stream, no numpy array, no Python object per Message (ul_enqueue, _ulploop.h,
 * which the data plane's own ULP reads use too).
 *
 *   enqueue_message(vc, d_ula, s_ula, ethertype, payload) -> micropackets queued
 *
 * The oracle is Link.enqueue_message (stream_records(encode_stream(...))); the bytes on
 * the wire are the same (tests/unit/test_ulp_send.py).  Included by _link.c after _pump.h.
 */
#ifndef GSN_ULPSEND_H
#define GSN_ULPSEND_H

static PyObject *Core_enqueue_message(Core *s, PyObject *const *args, Py_ssize_t nargs)
{
    READY(s, NULL);
    int vc;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "enqueue_message(vc, d_ula, s_ula, ethertype, payload)");
        return NULL;
    }
    if (vc_arg(args[0], &vc) < 0)
        return NULL;
    long ethertype = PyLong_AsLong(args[3]);
    if (ethertype == -1 && PyErr_Occurred())
        return NULL;
    if (ethertype < 0 || ethertype > 0xFFFF)
        return PyErr_Format(PyExc_ValueError, "EtherType %ld out of range", ethertype);
    Py_buffer b[3];
    int got = 0;
    for (; got < 3; got++)
        if (PyObject_GetBuffer(args[got == 2 ? 4 : got + 1], &b[got], PyBUF_SIMPLE) < 0)
            break;
    PyObject *ret = NULL;
    if (got < 3)
        goto done;
    if (b[0].len != 6 || b[1].len != 6) {
        PyErr_SetString(PyExc_ValueError, "ULAs are 6 bytes");
        goto done;
    }
    if (RA_LLC + (uint64_t)b[2].len > ra_max_m_len(vc)) {
        PyErr_Format(PyExc_ValueError, "payload of %zd bytes exceeds the VC%d limit of %llu", b[2].len, vc,
                     (unsigned long long)(ra_max_m_len(vc) - RA_LLC));
        goto done;
    }
    Py_ssize_t n = ul_enqueue(s, vc, b[0].buf, b[1].buf, (unsigned)ethertype, b[2].buf, b[2].len);
    if (n >= 0)
        ret = PyLong_FromSsize_t(n);
done:
    while (got-- > 0)
        PyBuffer_Release(&b[got]);
    return ret;
}

#define ULPSEND_METHODS                                                                                    \
    {"enqueue_message", (PyCFunction)(void (*)(void))Core_enqueue_message, METH_FASTCALL,                  \
     "enqueue_message(vc, d_ula, s_ula, ethertype, payload) -> micropackets: one Message, encoded in C"},

#endif
