/*
 * Record walks in C, each the twin of a pure-Python loop (which stays the reference and
 * the fallback when this extension is not built; the tests run both on the same inputs).
 *
 * walk(buffer, start, end, count) -> (min_delta, max_delta, null_keys) | str
 *
 *   The walk of odradek.records.validation (produce validation): the same checks, in the
 *   same order, as its _walk. Returns a tuple for a sound records section, or a str saying
 *   what is wrong (the caller raises InvalidRecordsError with it). Never reads outside
 *   [start, end).
 *
 * decode_records(section, count, base_offset, base_timestamp, append_time, cls, slots,
 *                constants, append, min_offset, no_headers) -> int | str
 *
 *   The record loop of odradek.records.fast_decode (decode_batch and the consumer): builds
 *   one cls object per record, see decode_records below. Returns how many records it
 *   appended, or a str saying what is wrong (the caller raises CorruptRecordError). It
 *   accepts exactly the sections the Python loop accepts; never reads outside the section.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#include "../bigendian.h"

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

/* The records walk shared by walk and leader_batch: 0 with out = (smallest, largest
 * timestampDelta, null keys), or -1 with *message set to what is wrong when message is not
 * NULL (NULL is left there if building the message failed: an exception is then set). */
#define FAIL(...) do { if (message != NULL) *message = PyUnicode_FromFormat(__VA_ARGS__); \
                       return -1; } while (0)

static int
walk_section(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count,
             int64_t out[3], PyObject **message)
{
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
    out[0] = min_delta;
    out[1] = max_delta;
    out[2] = null_keys;
    return 0;
}

#undef FAIL

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
    int64_t found[3];
    if (pos < 0 || end > view.len || pos > end || count < 1) {
        PyErr_SetString(PyExc_ValueError, "walk: bad bounds or count");
    } else if (walk_section((const uint8_t *)view.buf, pos, end, count, found, &result) == 0) {
        result = Py_BuildValue("(LLL)", (long long)found[0], (long long)found[1],
                               (long long)found[2]);
    }
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------ leader_batch */

#define HEADER_SIZE 61
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define CONTROL_MASK 0x20

/* leader_batch(header_cls, crc32c, buffer) -> (header, min_ts, max_ts, null_keys) | None
 *
 * The happy path of a leader's checks on the commonest append (odradek.storage.log_append
 * parse_batches): buffer holds exactly one uncompressed, non-control record batch v2 whose
 * CRC (crc32c, the crc32c package's function, called on a view of the covered bytes)
 * matches and whose records pass the walk. Returns its header (a header_cls, built as
 * tuple.__new__(header_cls, fields) is) and its records' smallest and largest absolute
 * timestamps (both maxTimestamp for LogAppendTime) and null-key count. Returns None for
 * anything else, bad or merely unusual, without saying why: the caller then takes the
 * Python path, which decides and words every error. Never writes to buffer. */
static PyObject *
leader_batch(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj, *cls, *crc_fn;
    if (!PyArg_ParseTuple(args, "O!OO", &PyType_Type, &cls, &crc_fn, &obj))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "leader_batch: header_cls must be a tuple type");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len;
    if (size < HEADER_SIZE || (Py_ssize_t)be32(p + 8) + 12 != size || p[16] != 2)
        goto decline;
    int32_t last_offset_delta = be32(p + 23), records_count = be32(p + 57);
    int16_t attributes = be16(p + 21);
    if (records_count <= 0 || last_offset_delta < 0 ||
        (int64_t)records_count != (int64_t)last_offset_delta + 1 ||
        (attributes & (CODEC_MASK | CONTROL_MASK)) != 0 ||
        (Py_ssize_t)records_count * 7 > size - HEADER_SIZE)
        goto decline;
    uint32_t stored_crc = (uint32_t)be32(p + 17);
    PyObject *covered = PyMemoryView_FromMemory((char *)p + 21, size - 21, PyBUF_READ);
    if (covered == NULL)
        goto done;
    PyObject *crc = PyObject_CallOneArg(crc_fn, covered);
    Py_DECREF(covered);
    if (crc == NULL)
        goto done;
    unsigned long actual = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (actual == (unsigned long)-1 && PyErr_Occurred())
        goto done;
    if (actual != stored_crc)
        goto decline;
    int64_t found[3];
    if (walk_section(p, HEADER_SIZE, size, records_count, found, NULL) < 0)
        goto decline;
    int64_t base_timestamp = be64(p + 27), max_timestamp = be64(p + 35), low, high;
    if (attributes & TIMESTAMP_TYPE_MASK) {
        low = high = max_timestamp;
    } else if (__builtin_add_overflow(base_timestamp, found[0], &low) ||
               __builtin_add_overflow(base_timestamp, found[1], &high)) {
        goto decline;
    }
    PyObject *fields = Py_BuildValue(
        "(LiiiIiiLLLiii)", (long long)be64(p), be32(p + 8), be32(p + 12), (int)p[16],
        (unsigned int)stored_crc, (int)attributes, last_offset_delta, (long long)base_timestamp,
        (long long)max_timestamp, (long long)be64(p + 43), (int)be16(p + 51), be32(p + 53),
        records_count);
    if (fields == NULL)
        goto done;
    PyObject *new_args = PyTuple_Pack(1, fields);
    Py_DECREF(fields);
    if (new_args == NULL)
        goto done;
    PyObject *header = PyTuple_Type.tp_new((PyTypeObject *)cls, new_args, NULL);
    Py_DECREF(new_args);
    if (header == NULL)
        goto done;
    result = Py_BuildValue("(NLLL)", header, (long long)low, (long long)high,
                           (long long)found[2]);
    goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

#define FAIL(...) do { result = PyUnicode_FromFormat(__VA_ARGS__); goto done; } while (0)

/* ---------------------------------------------------------------------- decode_records */

/* The offset of a __slots__ member of cls (a member descriptor cls instances have), or -1
 * with TypeError set. Checked once per call, so the loop can store into the slot directly,
 * as the descriptor's __set__ would (a fresh object's slots are all NULL). */
static Py_ssize_t
slot_offset(PyObject *descr, PyTypeObject *cls)
{
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_SetString(PyExc_TypeError, "decode_records: a slot is not a member descriptor");
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY) || member->offset <= 0 ||
        !PyType_IsSubtype(cls, ((PyDescrObject *)descr)->d_type)) {
        PyErr_SetString(PyExc_TypeError, "decode_records: a slot is not a writable slot of cls");
        return -1;
    }
    return member->offset;
}

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* base + delta as an int, exact even where int64 overflows (a hostile header). */
static PyObject *
sum_as_int(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *r = NULL;
    if (a != NULL && b != NULL)
        r = PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* The headers of a record, already checked by the first pass: [(key str, value bytes|None)].
 * The bounds are checked again all the same (cheap, and no read can depend on the first
 * pass being right). */
static PyObject *
build_headers(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end)
{
    int64_t count = 0, length = 0;
    if (read_varint(p, &pos, end, &count) < 0 || count < 0 || count > end - pos)
        goto inconsistent;
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t h = 0; h < (Py_ssize_t)count; h++) {
        if (read_varint(p, &pos, end, &length) < 0 || length < 0 || length > end - pos) {
            Py_DECREF(list);
            goto inconsistent;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)p + pos, (Py_ssize_t)length,
                                             "surrogateescape");
        pos += (Py_ssize_t)length;
        PyObject *value = NULL;
        if (read_varint(p, &pos, end, &length) < 0 || length < -1 || length > end - pos) {
            Py_XDECREF(key);
            Py_DECREF(list);
            goto inconsistent;
        }
        if (length < 0) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)p + pos, (Py_ssize_t)length);
            pos += (Py_ssize_t)length;
        }
        PyObject *pair = (key != NULL && value != NULL) ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, h, pair);
    }
    return list;
inconsistent:
    PyErr_SetString(PyExc_SystemError, "decode_records: headers changed between passes");
    return NULL;
}

#define MAX_CONSTANTS 16

/*
 * Decodes the records section held by `section` (a bytes-like object: all of it) into
 * objects of `cls`, a __slots__ class whose __new__ is object's. `slots` holds the member
 * descriptors of offset, timestamp_ms, key, value, headers and attributes (None: not
 * kept); `constants` is a tuple of (member descriptor, value) pairs, the same for every
 * record. Records whose offset is below min_offset are checked but not built. Each record
 * object is passed to append(). Records without headers get no_headers (unless None: a
 * new list each). Python exceptions (MemoryError, append's) propagate.
 *
 * The checks are the Python loop's (fast_decode._decode), so both accept the same
 * sections: varints as odradek.records.varint reads them (overlong encodings allowed, a
 * value wider than its type or a continuation bit on the last byte refused), lengths
 * bounded by the record's declared end, the record's fields filling it exactly, and the
 * records filling the section exactly. Every varint read is bounded by the section's end.
 */
static PyObject *
decode_records(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj, *append_time, *cls_obj, *slots, *constants, *append, *no_headers;
    Py_ssize_t count;
    long long base_offset, base_timestamp, min_offset;
    if (!PyArg_ParseTuple(args, "OnLLOO!O!O!OLO", &obj, &count, &base_offset,
                          &base_timestamp, &append_time, &PyType_Type, &cls_obj,
                          &PyTuple_Type, &slots, &PyTuple_Type, &constants, &append,
                          &min_offset, &no_headers))
        return NULL;
    PyTypeObject *cls = (PyTypeObject *)cls_obj;
    if (cls->tp_new != PyBaseObject_Type.tp_new || (cls->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) {
        PyErr_SetString(PyExc_TypeError, "decode_records: cls must use object.__new__");
        return NULL;
    }
    if (PyTuple_GET_SIZE(slots) != 6 || PyTuple_GET_SIZE(constants) > MAX_CONSTANTS) {
        PyErr_SetString(PyExc_TypeError, "decode_records: 6 slots, at most 16 constants");
        return NULL;
    }
    Py_ssize_t at_offset, at_timestamp, at_key, at_value, at_headers, at_attributes = 0;
    if ((at_offset = slot_offset(PyTuple_GET_ITEM(slots, 0), cls)) < 0 ||
        (at_timestamp = slot_offset(PyTuple_GET_ITEM(slots, 1), cls)) < 0 ||
        (at_key = slot_offset(PyTuple_GET_ITEM(slots, 2), cls)) < 0 ||
        (at_value = slot_offset(PyTuple_GET_ITEM(slots, 3), cls)) < 0 ||
        (at_headers = slot_offset(PyTuple_GET_ITEM(slots, 4), cls)) < 0)
        return NULL;
    if (PyTuple_GET_ITEM(slots, 5) != Py_None &&
        (at_attributes = slot_offset(PyTuple_GET_ITEM(slots, 5), cls)) < 0)
        return NULL;
    Py_ssize_t n_constants = PyTuple_GET_SIZE(constants);
    Py_ssize_t constant_at[MAX_CONSTANTS];
    PyObject *constant_value[MAX_CONSTANTS];
    for (Py_ssize_t i = 0; i < n_constants; i++) {
        PyObject *pair = PyTuple_GET_ITEM(constants, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "decode_records: constants are (slot, value)");
            return NULL;
        }
        if ((constant_at[i] = slot_offset(PyTuple_GET_ITEM(pair, 0), cls)) < 0)
            return NULL;
        constant_value[i] = PyTuple_GET_ITEM(pair, 1); /* kept alive by `constants` */
    }
    /* A record holding only atomic values (int, str, bytes, None) and the shared read-only
     * no_headers list cannot be part of a reference cycle: it is untracked by the garbage
     * collector, as CPython untracks such tuples and dicts. The consumer's records then
     * cost no collector walks (the collections were most of its CPU per 100 B record). */
    int atomic_constants = no_headers != Py_None;
    for (Py_ssize_t i = 0; i < n_constants; i++)
        if (PyObject_IS_GC(constant_value[i]))
            atomic_constants = 0;
    if (append_time != Py_None && !PyLong_Check(append_time)) {
        PyErr_SetString(PyExc_TypeError, "decode_records: append_time must be an int or None");
        return NULL;
    }

    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    PyObject *result = NULL;
    Py_ssize_t pos = 0, appended = 0, index = 0;
    int64_t value;
    if (count < 0 || count > end / 7)
        FAIL("%zd records cannot fit a records section of %zd bytes", count, end);
    for (index = 0; index < count; index++) {
        if (read_varint(p, &pos, end, &value) < 0)
            FAIL("record %zd: bad or truncated length varint", index);
        if (value < 6 || value > end - pos)
            FAIL("record %zd has impossible length %lld (%zd bytes remain)", index,
                 (long long)value, end - pos);
        const Py_ssize_t record_end = pos + (Py_ssize_t)value, length = (Py_ssize_t)value;
        const uint8_t attributes = p[pos];
        pos += 1;
        int64_t timestamp_delta, offset_delta, key_length, value_length;
        if (read_varlong(p, &pos, end, &timestamp_delta) < 0)
            FAIL("record %zd: bad or truncated timestamp delta", index);
        if (read_varint(p, &pos, end, &offset_delta) < 0)
            FAIL("record %zd: bad or truncated offset delta", index);
        if (read_varint(p, &pos, end, &key_length) < 0)
            FAIL("record %zd: bad or truncated key length", index);
        const Py_ssize_t key_at = pos;
        if (key_length < -1)
            FAIL("record %zd has negative key length %lld", index, (long long)key_length);
        if (key_length >= 0) {
            if (key_length > record_end - pos)
                FAIL("key of %lld bytes overruns record %zd", (long long)key_length, index);
            pos += (Py_ssize_t)key_length;
        }
        if (read_varint(p, &pos, end, &value_length) < 0)
            FAIL("record %zd: bad or truncated value length", index);
        const Py_ssize_t value_at = pos;
        if (value_length < -1)
            FAIL("record %zd has negative value length %lld", index, (long long)value_length);
        if (value_length >= 0) {
            if (value_length > record_end - pos)
                FAIL("value of %lld bytes overruns record %zd", (long long)value_length, index);
            pos += (Py_ssize_t)value_length;
        }
        if (pos >= end)
            FAIL("records are truncated after %zd records", index);
        const Py_ssize_t headers_at = pos;
        if (p[pos] == 0) {
            pos += 1;
        } else {
            int64_t headers, length;
            if (read_varint(p, &pos, end, &headers) < 0)
                FAIL("record %zd: bad or truncated header count", index);
            if (headers < 0 || headers * 2 > (int64_t)(record_end - pos))
                FAIL("record %zd has impossible header count %lld", index, (long long)headers);
            for (int64_t h = 0; h < headers; h++) {
                if (read_varint(p, &pos, end, &length) < 0)
                    FAIL("record %zd: bad or truncated header key length", index);
                if (length < 0 || length > record_end - pos)
                    FAIL("record %zd has impossible header key length %lld", index,
                         (long long)length);
                pos += (Py_ssize_t)length;
                if (read_varint(p, &pos, end, &length) < 0)
                    FAIL("record %zd: bad or truncated header value length", index);
                if (length < -1)
                    FAIL("record %zd has negative header value length %lld", index,
                         (long long)length);
                if (length >= 0) {
                    if (length > record_end - pos)
                        FAIL("a header value of record %zd overruns it", index);
                    pos += (Py_ssize_t)length;
                }
            }
        }
        if (pos != record_end)
            FAIL("record %zd declares %zd bytes but its fields take %zd", index, length,
                 length + pos - record_end);
        /* Checked: build it, unless it comes before min_offset (a compressed batch comes
         * whole, even its already consumed part). */
        int64_t offset;
        if (__builtin_add_overflow((int64_t)base_offset, offset_delta, &offset)) {
            if (offset_delta < 0)
                continue; /* below any int64 min_offset */
            offset = INT64_MAX; /* above any: built below from the exact sum */
        } else if (offset < min_offset) {
            continue;
        }
        PyObject *fields[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
        fields[0] = sum_as_int(base_offset, offset_delta);
        fields[1] = append_time == Py_None ? sum_as_int(base_timestamp, timestamp_delta)
                                           : Py_NewRef(append_time);
        fields[2] = key_length < 0 ? Py_NewRef(Py_None)
                                   : PyBytes_FromStringAndSize((const char *)p + key_at,
                                                               (Py_ssize_t)key_length);
        fields[3] = value_length < 0 ? Py_NewRef(Py_None)
                                     : PyBytes_FromStringAndSize((const char *)p + value_at,
                                                                 (Py_ssize_t)value_length);
        if (p[headers_at] == 0)
            fields[4] = no_headers == Py_None ? PyList_New(0) : Py_NewRef(no_headers);
        else
            fields[4] = build_headers(p, headers_at, end);
        fields[5] = at_attributes ? PyLong_FromLong(attributes) : Py_NewRef(Py_None);
        PyObject *record = NULL;
        if (fields[0] && fields[1] && fields[2] && fields[3] && fields[4] && fields[5])
            record = cls->tp_alloc(cls, 0);
        if (record == NULL) {
            for (int i = 0; i < 6; i++)
                Py_XDECREF(fields[i]);
            goto done;
        }
        for (Py_ssize_t i = 0; i < n_constants; i++)
            SLOT(record, constant_at[i]) = Py_NewRef(constant_value[i]);
        SLOT(record, at_offset) = fields[0];
        SLOT(record, at_timestamp) = fields[1];
        SLOT(record, at_key) = fields[2];
        SLOT(record, at_value) = fields[3];
        SLOT(record, at_headers) = fields[4];
        if (at_attributes)
            SLOT(record, at_attributes) = fields[5];
        else
            Py_DECREF(fields[5]);
        if (atomic_constants && fields[4] == no_headers && PyObject_GC_IsTracked(record))
            PyObject_GC_UnTrack(record);
        PyObject *ignored = PyObject_CallOneArg(append, record);
        Py_DECREF(record);
        if (ignored == NULL)
            goto done;
        Py_DECREF(ignored);
        appended++;
    }
    if (pos != end)
        FAIL("%zd bytes are left after the %zd records", end - pos, count);
    result = PyLong_FromSsize_t(appended);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk the records of a batch; a tuple, or a str on error."},
    {"leader_batch", leader_batch, METH_VARARGS,
     "A leader's checks of one uncompressed batch: (header, min_ts, max_ts, null_keys) or None."},
    {"decode_records", decode_records, METH_VARARGS,
     "Decode a records section into objects; how many were appended, or a str on error."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "C record walks for odradek.records.validation and .fast_decode.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModule_Create(&module);
}
