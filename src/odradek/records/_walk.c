/*
 * The record walk of odradek.records.validation in C: the same checks, in the same
 * order, as its pure-Python _walk (which stays the reference and the fallback when
 * this extension is not built). The tests run both on the same inputs.
 *
 * walk(buffer, start, end, count) -> (min_delta, max_delta, null_keys) | str
 *
 * Returns a tuple for a sound records section, or a str saying what is wrong (the
 * caller raises InvalidRecordsError with it). Never reads outside [start, end).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Reads an unsigned LEB128 of at most max_bytes bytes, whose value must fit max_bits.
 * Returns 0 and advances *pos, or -1 (truncated, too long or out of range). */
static int
read_raw(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int max_bits,
         uint64_t *out)
{
    uint64_t raw = 0;
    Py_ssize_t at = *pos;
    for (int i = 0; i < max_bytes; i++) {
        if (at >= end)
            return -1;
        uint64_t byte = p[at++];
        int shift = 7 * i;
        uint64_t bits = byte & 0x7F;
        if (shift + 7 > max_bits && (bits >> (max_bits - shift)) != 0)
            return -1; /* value wider than the type */
        raw |= bits << shift;
        if (byte < 0x80) {
            *pos = at;
            *out = raw;
            return 0;
        }
    }
    return -1; /* continuation bit on the last allowed byte */
}

static int
read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    uint64_t raw;
    if (read_raw(p, pos, end, 5, 32, &raw) < 0)
        return -1;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

static int
read_varlong(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    uint64_t raw;
    if (read_raw(p, pos, end, 10, 64, &raw) < 0)
        return -1;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

#define FAIL(...) do { result = PyUnicode_FromFormat(__VA_ARGS__); goto done; } while (0)

static PyObject *
walk(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj;
    Py_ssize_t pos, end, count;
    if (!PyArg_ParseTuple(args, "Onnn", &obj, &pos, &end, &count))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || end > view.len || pos > end || count < 1) {
        PyErr_SetString(PyExc_ValueError, "walk: bad bounds or count");
        goto done;
    }
    const uint8_t *p = (const uint8_t *)view.buf;
    int64_t min_delta = 0, max_delta = 0, null_keys = 0, value;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (read_varint(p, &pos, end, &value) < 0)
            FAIL("record %zd: bad or truncated length varint", index);
        if (value < 6 || value > end - pos)
            FAIL("record %zd has impossible length %lld (%zd bytes remain)", index,
                 (long long)value, end - pos);
        Py_ssize_t record_end = pos + (Py_ssize_t)value;
        pos += 1; /* attributes */
        if (read_varlong(p, &pos, end, &value) < 0)
            FAIL("record %zd: bad or truncated timestamp delta", index);
        if (index == 0) {
            min_delta = max_delta = value;
        } else if (value > max_delta) {
            max_delta = value;
        } else if (value < min_delta) {
            min_delta = value;
        }
        if (read_varint(p, &pos, end, &value) < 0)
            FAIL("record %zd: bad or truncated offset delta", index);
        if (value != index)
            FAIL("record %zd has offset delta %lld", index, (long long)value);
        if (read_varint(p, &pos, end, &value) < 0)
            FAIL("record %zd: bad or truncated key length", index);
        if (value >= 0) {
            if (value > end - pos)
                FAIL("key of record %zd overruns the record", index);
            pos += (Py_ssize_t)value;
        } else if (value == -1) {
            null_keys++;
        } else {
            FAIL("record %zd has key length %lld", index, (long long)value);
        }
        if (pos >= record_end)
            FAIL("key of record %zd overruns the record", index);
        if (read_varint(p, &pos, end, &value) < 0)
            FAIL("record %zd: bad or truncated value length", index);
        if (value >= 0) {
            if (value > end - pos)
                FAIL("value of record %zd overruns the record", index);
            pos += (Py_ssize_t)value;
        } else if (value != -1) {
            FAIL("record %zd has value length %lld", index, (long long)value);
        }
        if (pos >= record_end)
            FAIL("value of record %zd overruns the record", index);
        if (p[pos] == 0) {
            pos += 1;
        } else {
            int64_t headers;
            if (read_varint(p, &pos, end, &headers) < 0)
                FAIL("record %zd: bad or truncated header count", index);
            if (headers < 0 || headers * 2 > record_end - pos)
                FAIL("record %zd has impossible header count %lld", index, (long long)headers);
            for (int64_t h = 0; h < headers; h++) {
                if (read_varint(p, &pos, end, &value) < 0)
                    FAIL("record %zd: bad or truncated header key length", index);
                if (value < 0)
                    FAIL("record %zd has header key length %lld", index, (long long)value);
                if (value > end - pos)
                    FAIL("a header key of record %zd overruns the record", index);
                pos += (Py_ssize_t)value;
                if (pos >= record_end)
                    FAIL("a header key of record %zd overruns the record", index);
                if (read_varint(p, &pos, end, &value) < 0)
                    FAIL("record %zd: bad or truncated header value length", index);
                if (value >= 0) {
                    if (value > end - pos)
                        FAIL("a header value of record %zd overruns the record", index);
                    pos += (Py_ssize_t)value;
                } else if (value != -1) {
                    FAIL("record %zd has header value length %lld", index, (long long)value);
                }
                if (pos > record_end)
                    FAIL("a header value of record %zd overruns the record", index);
            }
        }
        if (pos != record_end)
            FAIL("record %zd's fields do not fill its declared length", index);
    }
    if (pos != end)
        FAIL("%zd bytes remain after the %zd records", end - pos, count);
    result = Py_BuildValue("(LLL)", (long long)min_delta, (long long)max_delta,
                           (long long)null_keys);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk the records of a batch; a tuple, or a str on error."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "C record walk for odradek.records.validation.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModule_Create(&module);
}
