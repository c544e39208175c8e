/*
 * The lone-produce lane's frame reader in C: the twin of odradek.protocol.headers'
 * parse_request_header followed by odradek.protocol.produce_request's read_lone_produce,
 * which stay the reference and the fallback (the tests run both on the same inputs).
 *
 * read_lone(first_flexible, frame) ->
 *     (api_version, correlation_id, client_id, acks, timeout_ms, topic, partition,
 *      records_start, records_end) | None
 *
 *   For a Produce frame (request header and body, no size prefix) of the commonest shape:
 *   no transactional id, one topic, one partition, a record set long enough to be a batch,
 *   no tagged fields anywhere, nothing after it. client_id (None for null) and topic are
 *   the raw bytes as sent, not decoded; frame[records_start:records_end] is the record set.
 *   Versions from first_flexible on use the flexible encoding (request header v2).
 *
 *   Returns None for anything else, sound or not, without saying why: the caller then runs
 *   the Python readers, which accept every frame this accepts, with the same fields, and
 *   more (tagged fields in the header, for one). Never reads outside the frame.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../bigendian.h"

#define PRODUCE 0
#define SMALLEST_BATCH 61

/* An unsigned varint of at most 4 bytes (as produce_request._uvarint): 0 and advances *pos,
 * or -1 when truncated or longer. */
static int
uvarint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t size, int32_t *out)
{
    int32_t value = 0;
    Py_ssize_t at = *pos;
    for (int shift = 0; shift <= 21; shift += 7) {
        if (at >= size)
            return -1;
        uint8_t byte = p[at++];
        value |= (int32_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pos = at;
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* A string's or bytes' length as produce_request._length reads it: compact (varint of
 * length + 1) when flexible, else int16 or int32 (wide). 0 and advances *pos, or -1. */
static int
length_of(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t size, int flexible, int wide,
          int32_t *out)
{
    if (flexible) {
        int32_t raw;
        if (uvarint(p, pos, size, &raw) < 0)
            return -1;
        *out = raw - 1;
        return 0;
    }
    Py_ssize_t width = wide ? 4 : 2;
    if (size - *pos < width)
        return -1;
    *out = wide ? be32(p + *pos) : be16(p + *pos);
    *pos += width;
    return 0;
}

/* An array length saying "one element": 0 and advances *pos, or -1 for any other. */
static int
one_element(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t size, int flexible)
{
    if (flexible) {
        if (*pos >= size || p[*pos] != 2)
            return -1;
        *pos += 1;
        return 0;
    }
    if (size - *pos < 4 || be32(p + *pos) != 1)
        return -1;
    *pos += 4;
    return 0;
}

static PyObject *
read_lone(PyObject *Py_UNUSED(self), PyObject *args)
{
    int first_flexible;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "iO", &first_flexible, &obj))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len, pos = 8;
    /* Request header: api key, version, correlation id, client id (int16 length). */
    if (size < 10 || be16(p) != PRODUCE)
        goto decline;
    int16_t version = be16(p + 2);
    int32_t correlation_id = be32(p + 4);
    int flexible = version >= first_flexible;
    int16_t client_length = be16(p + 8);
    pos = 10;
    Py_ssize_t client_at = pos;
    if (client_length < -1 || (client_length > 0 && size - pos < client_length))
        goto decline;
    if (client_length > 0)
        pos += client_length;
    if (flexible) { /* header v2: no tagged fields */
        if (pos >= size || p[pos] != 0)
            goto decline;
        pos += 1;
    }
    /* Body: a null transactional id, acks, timeout. */
    if (flexible) {
        if (pos >= size || p[pos] != 0)
            goto decline;
        pos += 1;
    } else {
        if (size - pos < 2 || be16(p + pos) != -1)
            goto decline;
        pos += 2;
    }
    if (size - pos < 6)
        goto decline;
    int16_t acks = be16(p + pos);
    int32_t timeout_ms = be32(p + pos + 2);
    pos += 6;
    int32_t length;
    if (one_element(p, &pos, size, flexible) < 0 ||
        length_of(p, &pos, size, flexible, 0, &length) < 0 || length <= 0 ||
        size - pos < length)
        goto decline;
    Py_ssize_t topic_at = pos;
    pos += length;
    Py_ssize_t topic_length = length;
    if (one_element(p, &pos, size, flexible) < 0 || size - pos < 4)
        goto decline;
    int32_t partition = be32(p + pos);
    pos += 4;
    if (length_of(p, &pos, size, flexible, 1, &length) < 0 || length < SMALLEST_BATCH ||
        size - pos < length)
        goto decline;
    Py_ssize_t records_at = pos, records_end = pos + length;
    if (flexible) { /* no tagged fields in the partition, the topic or the request */
        if (size - records_end != 3 || p[records_end] != 0 || p[records_end + 1] != 0 ||
            p[records_end + 2] != 0)
            goto decline;
    } else if (records_end != size) {
        goto decline;
    }
    PyObject *client_id;
    if (client_length < 0) {
        client_id = Py_NewRef(Py_None);
    } else {
        client_id = PyBytes_FromStringAndSize((const char *)p + client_at, client_length);
        if (client_id == NULL)
            goto done;
    }
    PyObject *topic = PyBytes_FromStringAndSize((const char *)p + topic_at, topic_length);
    if (topic == NULL) {
        Py_DECREF(client_id);
        goto done;
    }
    result = Py_BuildValue("(iiNiiNinn)", (int)version, correlation_id, client_id, (int)acks,
                           timeout_ms, topic, partition, records_at, records_end);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"read_lone", read_lone, METH_VARARGS,
     "The fields of a lone Produce frame (header and body), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lone", "The lone-produce lane's frame reader in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__lone(void)
{
    return PyModule_Create(&module);
}
