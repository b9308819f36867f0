/* The scanner's string table (cuda_tracer/trace_json/_scan.c uses it): each distinct name,
 * category or call stack of a piece kept once, by its raw text, with an id in first-seen order;
 * made into Python strings once the scan is done. */
#ifndef CUDA_TRACER_SCAN_STRINGS_H
#define CUDA_TRACER_SCAN_STRINGS_H

#include "_scan_json.h"

typedef struct {
    Py_ssize_t offset, length;
    uint64_t hash;
    int32_t id;
} Slot;

typedef struct {
    Py_ssize_t offset, length;
    int escaped;
} Entry;

typedef struct {
    Slot *slots;
    size_t capacity, used;
    Entry *entries;      /* each id's raw text, in first-seen order; made str once scanned */
    size_t entries_capacity;
    const char *base;
} Strings;

/* A hash of a string from its length and three 8-byte loads (start, middle, end): names differ
 * there, and equal hashes are compared whole anyway. */
static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t words[3] = {0, 0, 0};
    if (n >= 8) {
        memcpy(&words[0], s, 8);
        memcpy(&words[1], s + n / 2 - 4, 8);
        memcpy(&words[2], s + n - 8, 8);
    } else {
        memcpy(&words[0], s, n);
    }
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < 3; i++) {
        h ^= words[i] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdULL;
    }
    return h ^ (h >> 33);
}

static int grow(Strings *table) {
    size_t capacity = table->capacity ? table->capacity * 2 : 1024;
    Slot *slots = calloc(capacity, sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < table->capacity; i++) {
        Slot s = table->slots[i];
        if (!s.id) continue;
        size_t j = s.hash & (capacity - 1);
        while (slots[j].id) j = (j + 1) & (capacity - 1);
        slots[j] = s;
    }
    free(table->slots);
    table->slots = slots;
    table->capacity = capacity;
    return 0;
}

/* The id of a string's raw content in the table (added on first sight). Slot ids are stored
 * plus one (0 marks an empty slot). Runs without the GIL: no Python object is made here. */
static Status intern(Strings *table, const char *s, Py_ssize_t n, int escaped, int32_t *id) {
    if (table->used * 2 >= table->capacity && grow(table)) return NO_MEMORY;
    uint64_t h = hash_bytes(s, n);
    size_t mask = table->capacity - 1, j = h & mask;
    for (;;) {
        Slot *slot = &table->slots[j];
        if (!slot->id) break;
        if (slot->hash == h && slot->length == n && !memcmp(table->base + slot->offset, s, n)) {
            *id = slot->id - 1;
            return OK;
        }
        j = (j + 1) & mask;
    }
    if (table->used == table->entries_capacity) {
        size_t capacity = table->entries_capacity ? table->entries_capacity * 2 : 256;
        Entry *grown = realloc(table->entries, capacity * sizeof(Entry));
        if (!grown) return NO_MEMORY;
        table->entries = grown;
        table->entries_capacity = capacity;
    }
    Py_ssize_t next = (Py_ssize_t)table->used;
    table->entries[next] = (Entry){s - table->base, n, escaped};
    Slot *slot = &table->slots[j];
    slot->offset = s - table->base;
    slot->length = n;
    slot->hash = h;
    slot->id = (int32_t)next + 1;
    table->used++;
    *id = (int32_t)next;
    return OK;
}

/* The table's strings as a list of str (with the GIL); NULL with no error set: one does not
 * decode (the piece is read the Python way). */
static PyObject *table_strings(Strings *table, PyObject *decode) {
    PyObject *list = PyList_New((Py_ssize_t)table->used);
    if (!list) return NULL;
    for (size_t i = 0; i < table->used; i++) {
        Entry e = table->entries[i];
        const char *s = table->base + e.offset;
        PyObject *str;
        if (e.escaped) {
            PyObject *raw = PyBytes_FromStringAndSize(s - 1, e.length + 2);
            str = raw ? PyObject_CallOneArg(decode, raw) : NULL;
            Py_XDECREF(raw);
            if (str && !PyUnicode_Check(str)) Py_CLEAR(str);
        } else {
            str = PyUnicode_DecodeUTF8(s, e.length, NULL);
        }
        if (!str) {
            PyErr_Clear();
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, str);
    }
    return list;
}

#endif
