/* One piece of a trace's event list (b"[{...}, {...}]") scanned straight into columns.
 *
 * The Python reader (trace_stream + trace_convert) decodes every event into a msgspec struct, then
 * reads each field back out of all the structs: about two thirds of a large trace's import. This
 * scanner reads the same fields in one pass over the text and writes them into flat arrays, with
 * no Python object per event (only one per distinct name or category).
 *
 * It reads only the common shapes and leaves everything else to the Python reader, which stays the
 * definition of the results:
 *   - returns None when the piece holds anything it does not read the same way (an element that is
 *     no object, a duplicate field, a time of a complete or instant event that is not a plain
 *     decimal, a string it cannot decode, nesting deeper than MAX_DEPTH): the caller reads the
 *     piece the Python way;
 *   - raises ValueError ending "(byte N)" when the text is not JSON (an unterminated string or
 *     value, as a cut in the middle of an event leaves): the caller tries an earlier cut;
 *   - marks "slow" the events whose args it does not read whole (a field with a value that is not
 *     a plain integer, a collective, a key with an escape): the caller decodes those args the
 *     Python way.
 *
 * Timestamps are exact: "1419116105360.746" (µs) is 1419116105360746 ns, digits finer than a
 * nanosecond are cut, as trace_times.decimal_ns does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MISSING (-1)
#define MAX_DEPTH 256
#define TIME_LIMIT_NS (((int64_t)1) << 62)
#define WHOLE_LIMIT (TIME_LIMIT_NS / 1000)

/* The integer args columns, in this order (trace_scan.ARG_COLUMNS names them). */
enum { A_EXTERNAL, A_EXTERNAL_LEGACY, A_CORRELATION, A_DEVICE, A_STREAM, A_BYTES, A_REGISTERS,
       A_SHARED_MEMORY, A_GRAPH_ID, A_GRID, A_BLOCK = A_GRID + 3, N_ARGS = A_BLOCK + 3 };

/* Phase codes: trace_schema.PHASE_CODE ("XiIMsftBEC" from 1; 0 for any other phase). */
static uint8_t phase_code(const char *s, Py_ssize_t n) {
    static const char phases[] = "XiIMsftBEC";
    if (n != 1) return 0;
    const char *at = memchr(phases, s[0], sizeof(phases) - 1);
    return at ? (uint8_t)(at - phases + 1) : 0;
}

typedef enum { OK = 0, UNUSUAL = 1, INVALID = 2, FAILED = 3, NO_MEMORY = 4 } Status;

typedef struct {
    const char *base, *p, *end;
    const char *error_at;
} Text;

static inline void skip_ws(Text *t) {
    if (t->p < t->end && (unsigned char)*t->p > ' ') return;
    uint64_t eight;  /* indented text: runs of spaces, eight at a time */
    while (t->end - t->p >= 8 && (memcpy(&eight, t->p, 8), eight == 0x2020202020202020ULL)) t->p += 8;
    while (t->p < t->end && (*t->p == ' ' || *t->p == '\n' || *t->p == '\r' || *t->p == '\t')) t->p++;
}

static inline Status invalid(Text *t) {
    if (!t->error_at) t->error_at = t->p;
    return INVALID;
}

/* Bytes that end the plain run of a string: the quote, a backslash, a control character. */
static uint8_t STRING_STOP[256];

static void init_tables(void) {
    for (int i = 0; i < 0x20; i++) STRING_STOP[i] = 1;
    STRING_STOP['"'] = STRING_STOP['\\'] = 1;
}

/* Whether none of the eight bytes at p ends a string's plain run (a quote, a backslash, a control
 * character), tested a word at a time. */
static inline int plain_eight(const char *p) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t w, quote, backslash;
    memcpy(&w, p, 8);
    quote = w ^ (ones * '"');
    backslash = w ^ (ones * '\\');
    uint64_t hits = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
                    ((w - ones * 0x20) & ~w);
    return !(hits & highs);
}

/* A string at t->p (its opening quote): [*start, *start + *len) is its raw content. */
static Status scan_string(Text *t, const char **start, Py_ssize_t *len, int *escaped) {
    const char *p = t->p + 1;
    *escaped = 0;
    for (;;) {
        const char *q = p;
        while (t->end - q >= 8 && plain_eight(q)) q += 8;
        while (q < t->end && !STRING_STOP[(unsigned char)*q]) q++;
        if (q >= t->end) { t->p = q; return invalid(t); }
        if (*q == '"') { *start = t->p + 1; *len = q - (t->p + 1); t->p = q + 1; return OK; }
        if ((unsigned char)*q < 0x20) { t->p = q; return invalid(t); }
        *escaped = 1;  /* a backslash: check the escape, skip it */
        if (q + 1 >= t->end) { t->p = q + 1; return invalid(t); }
        switch (q[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p = q + 2; break;
        case 'u':
            if (q + 6 > t->end) { t->p = q; return invalid(t); }
            for (int i = 2; i < 6; i++)
                if (!q[i] || !strchr("0123456789abcdefABCDEF", q[i])) { t->p = q; return invalid(t); }
            p = q + 6; break;
        default:
            t->p = q; return invalid(t);
        }
    }
}

/* A JSON number at t->p, checked; *plain: it is -?digits with no fraction or exponent. */
static Status scan_number(Text *t, int *plain) {
    const char *p = t->p;
    if (p < t->end && *p == '-') p++;
    if (p >= t->end || *p < '0' || *p > '9') { t->p = p; return invalid(t); }
    if (*p == '0' && p + 1 < t->end && p[1] >= '0' && p[1] <= '9') { t->p = p; return invalid(t); }
    while (p < t->end && *p >= '0' && *p <= '9') p++;
    *plain = 1;
    if (p < t->end && *p == '.') {
        *plain = 0; p++;
        if (p >= t->end || *p < '0' || *p > '9') { t->p = p; return invalid(t); }
        while (p < t->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < t->end && (*p == 'e' || *p == 'E')) {
        *plain = 0; p++;
        if (p < t->end && (*p == '+' || *p == '-')) p++;
        if (p >= t->end || *p < '0' || *p > '9') { t->p = p; return invalid(t); }
        while (p < t->end && *p >= '0' && *p <= '9') p++;
    }
    t->p = p;
    return OK;
}

/* The key of an object member at t->p, and the colon after it: t->p is left at the value. */
static Status member_key(Text *t, const char **key, Py_ssize_t *n, int *escaped) {
    Status s;
    if (t->p >= t->end || *t->p != '"') return invalid(t);
    if ((s = scan_string(t, key, n, escaped))) return s;
    skip_ws(t);
    if (t->p >= t->end || *t->p != ':') return invalid(t);
    t->p++;
    skip_ws(t);
    return OK;
}

/* After a member or element: *more 1 when another follows (its comma passed), 0 when ``close``
 * ends the container (passed too). */
static Status next_member(Text *t, char close, int *more) {
    skip_ws(t);
    if (t->p >= t->end) return invalid(t);
    if (*t->p == ',') { t->p++; skip_ws(t); *more = 1; return OK; }
    if (*t->p == close) { t->p++; *more = 0; return OK; }
    return invalid(t);
}

static Status skip_value(Text *t, int depth);

static Status skip_container(Text *t, int depth, char close) {
    if (depth >= MAX_DEPTH) return UNUSUAL;
    t->p++;
    skip_ws(t);
    if (t->p < t->end && *t->p == close) { t->p++; return OK; }
    for (;;) {
        const char *k; Py_ssize_t n; int esc, more; Status s;
        if (close == '}' && (s = member_key(t, &k, &n, &esc))) return s;
        if ((s = skip_value(t, depth + 1))) return s;
        if ((s = next_member(t, close, &more)) || !more) return s;
    }
}

static Status skip_literal(Text *t, const char *word, Py_ssize_t n) {
    if (t->end - t->p < n || memcmp(t->p, word, n)) return invalid(t);
    t->p += n;
    return OK;
}

static Status skip_value(Text *t, int depth) {
    if (t->p >= t->end) return invalid(t);
    switch (*t->p) {
    case '{': return skip_container(t, depth, '}');
    case '[': return skip_container(t, depth, ']');
    case '"': { const char *s; Py_ssize_t n; int e; return scan_string(t, &s, &n, &e); }
    case 't': return skip_literal(t, "true", 4);
    case 'f': return skip_literal(t, "false", 5);
    case 'n': return skip_literal(t, "null", 4);
    default: { int plain; return scan_number(t, &plain); }
    }
}

/* A number at t->p, if one starts there (*found 0, the value skipped, for any other value): its
 * digits start at *digits, after the minus sign of a *negative one, and end at t->p. */
static Status number_at(Text *t, const char **digits, int *negative, int *plain, int *found) {
    const char *start = t->p;
    *found = 0;
    if (t->p >= t->end || !(*t->p == '-' || (*t->p >= '0' && *t->p <= '9'))) return skip_value(t, 1);
    Status s = scan_number(t, plain);
    if (s) return s;
    *negative = *start == '-';
    *digits = start + *negative;
    *found = 1;
    return OK;
}

/* A plain integer value (-?digits, at most 18 of them) into *out; *is_int 0 for any other value
 * (skipped). */
static Status read_int(Text *t, int64_t *out, int *is_int) {
    const char *p;
    int negative, plain, found;
    *is_int = 0;
    Status s = number_at(t, &p, &negative, &plain, &found);
    if (s || !found || !plain || t->p - p > 18) return s;
    int64_t v = 0;
    for (; p < t->p; p++) v = v * 10 + (*p - '0');
    *out = negative ? -v : v;
    *is_int = 1;
    return OK;
}

/* A pid or tid into *out, as to_int reads it: a plain integer; a string of 1 to 15 digits
 * (int(float("25738")), exact below 2**53); MISSING for a string float() cannot read ("", or one
 * starting with a letter other than those of inf and nan: "stream 7"). *is_int 0 for any other
 * value; *named 1 for a string (the caller keeps its text for metadata events). */
static Status read_id(Text *t, int64_t *out, int *is_int, int *named) {
    *named = 0;
    if (t->p >= t->end || *t->p != '"') return read_int(t, out, is_int);
    const char *s; Py_ssize_t n; int escaped;
    Status status = scan_string(t, &s, &n, &escaped);
    *is_int = 0;
    *named = 1;
    if (status || escaped) return status;
    unsigned char first = n ? (unsigned char)s[0] : 0;
    if (!n || (((first | 0x20) >= 'a' && (first | 0x20) <= 'z') && !strchr("iInN", first))) {
        *out = MISSING;
        *is_int = 1;
        return OK;
    }
    if (n > 15) return OK;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return OK;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    *is_int = 1;
    return OK;
}

/* A plain decimal time (µs) as exact ns, as trace_times.decimal_ns: *ok 0 for any other value. */
static Status read_time(Text *t, int64_t *ns, int *ok) {
    const char *p;
    int negative, plain, found;
    *ok = 0;
    Status s = number_at(t, &p, &negative, &plain, &found);
    if (s || !found) return s;
    int64_t whole = 0, frac = 0;
    int whole_digits = 0, frac_digits = 0;
    for (; p < t->p && *p != '.'; p++, whole_digits++) {
        if (*p < '0' || *p > '9' || whole_digits >= 18) return OK;  /* an exponent; too long */
        whole = whole * 10 + (*p - '0');
    }
    if (p < t->p) {
        for (p++; p < t->p; p++, frac_digits++) {
            if (*p < '0' || *p > '9' || frac_digits >= 18) return OK;
            if (frac_digits < 3) frac = frac * 10 + (*p - '0');
        }
    }
    for (int d = frac_digits; d < 3; d++) frac *= 10;
    if (whole >= WHOLE_LIMIT) return OK;
    int64_t v = whole * 1000 + frac;
    if (v >= TIME_LIMIT_NS) return OK;
    *ns = negative ? -v : v;
    *ok = 1;
    return OK;
}

/* ------------------------------------------------------------------ the string table */
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

/* ------------------------------------------------------------------ the columns */
/* Each column is a bytearray (handed to numpy without a copy), grown by doubling. */
enum { C_PHASE, C_SLOW, C_NAME, C_CAT, C_TS, C_DUR, C_PID, C_TID, C_ARGS_START, C_ARGS_END,
       C_ARGS, C_STACK, N_ARRAYS };
static const Py_ssize_t ITEM_SIZE[N_ARRAYS] = {1, 1, 4, 4, 8, 8, 8, 8, 8, 8, 8 * N_ARGS, 4};

/* A pid or tid kept aside as its JSON text: (row, "pid"|"tid", text) for Python to read. */
typedef struct {
    Py_ssize_t row, offset, length;
    int tid;
} Odd;

typedef struct {
    Py_ssize_t count, capacity;
    PyObject *store[N_ARRAYS];
    uint8_t *phase, *slow;
    int32_t *name, *cat, *stack;
    int64_t *ts, *dur, *pid, *tid, *args_start, *args_end, *args;
    Odd *odd;        /* pid/tid values that are no plain int (see Odd) */
    Py_ssize_t odd_count, odd_capacity;
    PyThreadState *released;  /* while scanning without the GIL: the state to take it back with */
} Columns;

static int resize(Columns *c, Py_ssize_t capacity) {
    for (int i = 0; i < N_ARRAYS; i++) {
        if (!c->store[i] && !(c->store[i] = PyByteArray_FromStringAndSize(NULL, 0))) return -1;
        if (PyByteArray_Resize(c->store[i], capacity * ITEM_SIZE[i])) return -1;
    }
    void *at[N_ARRAYS];
    for (int i = 0; i < N_ARRAYS; i++) at[i] = PyByteArray_AS_STRING(c->store[i]);
    c->phase = at[C_PHASE]; c->slow = at[C_SLOW]; c->name = at[C_NAME]; c->cat = at[C_CAT];
    c->ts = at[C_TS]; c->dur = at[C_DUR]; c->pid = at[C_PID]; c->tid = at[C_TID];
    c->args_start = at[C_ARGS_START]; c->args_end = at[C_ARGS_END]; c->args = at[C_ARGS];
    c->stack = at[C_STACK];
    c->capacity = capacity;
    return 0;
}

/* Room for one more row; grows the columns (taking the GIL back for it when scanning without). */
static inline Status reserve(Columns *c) {
    if (c->count < c->capacity) return OK;
    if (c->released) PyEval_RestoreThread(c->released);
    int failed = resize(c, c->capacity * 2);
    if (failed) PyErr_Clear();
    if (c->released) c->released = PyEval_SaveThread();
    return failed ? NO_MEMORY : OK;
}

static void free_columns(Columns *c) {
    for (int i = 0; i < N_ARRAYS; i++) Py_XDECREF(c->store[i]);
    free(c->odd);
}

/* The keys read, in the order of their columns (args) or field bits (events). */
typedef struct {
    const char *name;
    Py_ssize_t length;
} Key;

#define KEY(text) {text, sizeof(text) - 1}
static const Key EVENT_KEYS[] = {KEY("ph"), KEY("cat"), KEY("name"), KEY("pid"), KEY("tid"),
                                 KEY("ts"), KEY("dur"), KEY("args")};
static const Key ARG_KEYS[] = {KEY("External id"), KEY("external id"), KEY("correlation"),
                               KEY("device"), KEY("stream"), KEY("bytes"),
                               KEY("registers per thread"), KEY("shared memory"), KEY("graph id"),
                               KEY("grid"), KEY("block"), KEY("Collective name"), KEY("Call stack")};
enum { N_EVENT_KEYS = 8, K_GRID = 9, K_BLOCK, K_COLLECTIVE, K_CALL_STACK, N_ARG_KEYS };

static int find_key(const char *k, Py_ssize_t n, const Key *keys, int count) {
    for (int i = 0; i < count; i++)
        if (keys[i].length == n && !memcmp(keys[i].name, k, n)) return i;
    return -1;
}

/* [x, y, z] of plain integers into out[0..2]; *ok 0 for any other value (skipped). */
static Status read_triple(Text *t, int64_t *out, int *ok) {
    *ok = 0;
    if (t->p >= t->end || *t->p != '[') return skip_value(t, 1);
    t->p++;
    int count = 0, all_int = 1;
    skip_ws(t);
    if (t->p < t->end && *t->p == ']') { t->p++; return OK; }
    for (;;) {
        int64_t v = MISSING; int is_int;
        Status s = read_int(t, &v, &is_int);
        if (s) return s;
        if (count < 3) out[count] = v;
        all_int &= is_int;
        count++;
        int more;
        if ((s = next_member(t, ']', &more))) return s;
        if (!more) break;
    }
    *ok = count == 3 && all_int;
    return OK;
}

/* The args object of row r: its integer fields into the args columns; anything it does not read
 * whole marks the row slow. */
static Status scan_args(Text *t, Columns *c, Strings *strings, Py_ssize_t r) {
    int64_t *a = c->args + r * N_ARGS;
    t->p++;
    skip_ws(t);
    if (t->p < t->end && *t->p == '}') { t->p++; return OK; }
    for (;;) {
        const char *k; Py_ssize_t n; int esc, more; Status s;
        if ((s = member_key(t, &k, &n, &esc))) return s;
        int key = esc ? -1 : find_key(k, n, ARG_KEYS, N_ARG_KEYS);
        int column = key >= 0 && key < K_GRID ? key : -1;
        int triple = key == K_GRID ? A_GRID : key == K_BLOCK ? A_BLOCK : -1;
        if (esc) c->slow[r] = 1;
        else if (key == K_COLLECTIVE) c->slow[r] = 1;
        else if (key == K_CALL_STACK) {  /* a string into the table; "" is none */
            if (t->p < t->end && *t->p == '"') {
                const char *str; Py_ssize_t len; int escaped;
                if ((s = scan_string(t, &str, &len, &escaped))) return s;
                if (len && (s = intern(strings, str, len, escaped, &c->stack[r]))) return s;
                goto next;
            }
            c->slow[r] = 1;
        }
        if (column >= 0) {
            int is_int;
            int64_t v = MISSING;
            if ((s = read_int(t, &v, &is_int))) return s;
            if (is_int) a[column] = v; else c->slow[r] = 1;
        } else if (triple >= 0) {
            int ok;
            if ((s = read_triple(t, a + triple, &ok))) return s;
            if (!ok) c->slow[r] = 1;
        } else if ((s = skip_value(t, 2))) {
            return s;
        }
    next:
        if ((s = next_member(t, '}', &more)) || !more) return s;
    }
}

static Status add_odd(Columns *c, Py_ssize_t r, int tid, Py_ssize_t offset, Py_ssize_t n) {
    if (c->odd_count == c->odd_capacity) {
        Py_ssize_t capacity = c->odd_capacity ? c->odd_capacity * 2 : 64;
        Odd *grown = realloc(c->odd, capacity * sizeof(Odd));
        if (!grown) return NO_MEMORY;
        c->odd = grown;
        c->odd_capacity = capacity;
    }
    c->odd[c->odd_count++] = (Odd){r, offset, n, tid};
    return OK;
}

/* The odd values as a list of (row, "pid"|"tid", JSON text), with the GIL. */
static PyObject *odd_list(Columns *c, const char *base) {
    PyObject *list = PyList_New(c->odd_count);
    for (Py_ssize_t i = 0; list && i < c->odd_count; i++) {
        Odd o = c->odd[i];
        PyObject *item = Py_BuildValue("(nsy#)", o.row, o.tid ? "tid" : "pid", base + o.offset,
                                       o.length);
        if (!item) Py_CLEAR(list); else PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* One bit per event field, in the order of EVENT_KEYS. */
enum { F_PH = 1, F_CAT = 2, F_NAME = 4, F_PID = 8, F_TID = 16, F_TS = 32, F_DUR = 64, F_ARGS = 128 };

/* One event object at t->p into row c->count. */
static Status scan_event(Text *t, Columns *c, Strings *strings) {
    Status grown = reserve(c);
    if (grown) return grown;
    Py_ssize_t r = c->count;
    c->phase[r] = 0; c->slow[r] = 0; c->name[r] = -1; c->cat[r] = -1;
    c->ts[r] = 0; c->dur[r] = 0; c->pid[r] = MISSING; c->tid[r] = MISSING;
    c->args_start[r] = -1; c->args_end[r] = -1; c->stack[r] = -1;
    for (int i = 0; i < N_ARGS; i++) c->args[r * N_ARGS + i] = MISSING;
    int seen = 0, times_plain = 1;
    const char *odd_text[2] = {NULL, NULL};
    Py_ssize_t odd_length[2] = {0, 0};
    int odd_read[2] = {0, 0};
    t->p++;
    skip_ws(t);
    if (t->p < t->end && *t->p == '}') { t->p++; c->count++; return OK; }
    for (;;) {
        const char *k; Py_ssize_t n; int esc, more; Status s;
        if ((s = member_key(t, &k, &n, &esc))) return s;
        if (esc) return UNUSUAL;  /* a key that might decode to one of ours */
        int key = find_key(k, n, EVENT_KEYS, N_EVENT_KEYS);
        int field = key >= 0 ? 1 << key : 0;
        if (field & seen) return UNUSUAL;  /* a duplicate field */
        seen |= field;
        const char *value = t->p;
        if (field == F_PH || field == F_CAT || field == F_NAME) {
            if (t->p < t->end && *t->p == '"') {
                const char *str; Py_ssize_t len; int escaped;
                if ((s = scan_string(t, &str, &len, &escaped))) return s;
                if (field == F_PH) {
                    c->phase[r] = escaped ? 0 : phase_code(str, len);
                    if (escaped) return UNUSUAL;
                } else {
                    int32_t id;
                    if ((s = intern(strings, str, len, escaped, &id))) return s;
                    if (field == F_CAT) c->cat[r] = id; else c->name[r] = id;
                }
            } else if (field == F_PH) {
                return UNUSUAL;  /* a phase that is no string */
            } else if ((s = skip_value(t, 1))) {
                return s;
            }
        } else if (field == F_PID || field == F_TID) {
            int64_t v = MISSING; int is_int, named;
            if ((s = read_id(t, &v, &is_int, &named))) return s;
            if (is_int) {
                if (field == F_PID) c->pid[r] = v; else c->tid[r] = v;
            }
            if (!is_int || named) {  /* kept aside: its text, for metadata or for Python to read */
                int k = field == F_PID ? 0 : 1;
                odd_text[k] = value; odd_length[k] = t->p - value; odd_read[k] = is_int;
            }
        } else if (field == F_TS || field == F_DUR) {
            int ok;
            if ((s = read_time(t, field == F_TS ? &c->ts[r] : &c->dur[r], &ok))) return s;
            times_plain &= ok;
        } else if (field == F_ARGS) {
            c->args_start[r] = t->p - t->base;
            if (t->p < t->end && *t->p == '{') {
                if ((s = scan_args(t, c, strings, r))) return s;
            } else {
                if ((s = skip_value(t, 1))) return s;
                c->slow[r] = 1;
            }
            c->args_end[r] = t->p - t->base;
        } else if ((s = skip_value(t, 1))) {
            return s;
        }
        if ((s = next_member(t, '}', &more))) return s;
        if (!more) break;
    }
    uint8_t ph = c->phase[r];
    if (!(seen & F_PH)) return UNUSUAL;  /* no phase: the loose schema's business */
    if ((ph == 1 || ph == 2 || ph == 3) && (!times_plain || !(seen & F_TS))) return UNUSUAL;
    for (int k = 0; k < 2; k++) {  /* read ones only for metadata ("M"), which keeps the text */
        Status s;
        if (odd_text[k] && (!odd_read[k] || ph == 4) &&
            (s = add_odd(c, r, k, odd_text[k] - t->base, odd_length[k])))
            return s;
    }
    c->count++;
    return OK;
}

static Status scan_list(Text *t, Columns *c, Strings *strings) {
    skip_ws(t);
    if (t->p >= t->end || *t->p != '[') return UNUSUAL;
    t->p++;
    skip_ws(t);
    if (t->p < t->end && *t->p == ']') { t->p++; goto tail; }
    for (;;) {
        Status s;
        if (t->p >= t->end) return invalid(t);
        if (*t->p != '{') {  /* no object: not JSON at all, or not a list of events */
            if ((s = skip_value(t, 1))) return s;
            return UNUSUAL;
        }
        if ((s = scan_event(t, c, strings))) return s;
        int more;
        if ((s = next_member(t, ']', &more))) return s;
        if (!more) break;
    }
tail:
    skip_ws(t);
    if (t->p != t->end) return invalid(t);
    return OK;
}

PyDoc_STRVAR(scan_doc,
"scan(piece, decode_string) -> tuple | None\n\n"
"The events of ``piece`` (a JSON list of trace events) as columns: (count, strings, phase, name,\n"
"cat, ts, dur, pid, tid, odd, slow, args_start, args_end, args, stack), each column a bytearray of a\n"
"uint8/int32/int64 array. None: read the piece the Python way. ValueError '... (byte N)': not JSON.");

static PyObject *scan(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2) { PyErr_SetString(PyExc_TypeError, "scan(piece, decode_string)"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE)) return NULL;
    Text t = {view.buf, view.buf, (const char *)view.buf + view.len, NULL};
    Strings strings = {NULL, 0, 0, NULL, 0, view.buf};
    Columns c = {0};
    PyObject *result = NULL, *names = NULL, *odd = NULL;
    /* about one event per 170 bytes of a Kineto trace: sized so that most pieces never grow */
    Status s = FAILED;
    if (!resize(&c, view.len / 128 + 16)) {
        c.released = PyEval_SaveThread();  /* the scan makes no Python object: other threads run */
        s = scan_list(&t, &c, &strings);
        PyEval_RestoreThread(c.released);
        c.released = NULL;
    }
    if (s == OK && !(names = table_strings(&strings, argv[1]))) s = PyErr_Occurred() ? FAILED : UNUSUAL;
    if (s == OK && (resize(&c, c.count) || !(odd = odd_list(&c, t.base)))) s = FAILED;
    if (s == OK) {
        PyObject **k = c.store;
        result = Py_BuildValue("(nOOOOOOOOOOOOOO)", c.count, names, k[C_PHASE],
            k[C_NAME], k[C_CAT], k[C_TS], k[C_DUR], k[C_PID], k[C_TID], odd, k[C_SLOW],
            k[C_ARGS_START], k[C_ARGS_END], k[C_ARGS], k[C_STACK]);
    } else if (s == UNUSUAL) {
        result = Py_NewRef(Py_None);
    } else if (s == INVALID) {
        PyErr_Format(PyExc_ValueError, "invalid JSON (byte %zd)",
                     (Py_ssize_t)((t.error_at ? t.error_at : t.p) - t.base));
    } else if (s == NO_MEMORY || !PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    free(strings.slots);
    free(strings.entries);
    Py_XDECREF(names);
    Py_XDECREF(odd);
    free_columns(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "Trace events scanned straight into columns (see cuda_tracer/trace_scan.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "N_ARGS", N_ARGS)) { Py_DECREF(m); return NULL; }
    return m;
}
