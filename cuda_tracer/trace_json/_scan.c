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

#include "_scan_json.h"
#include "_scan_keys.h"
#include "_scan_strings.h"

/* The integer args columns, in this order (trace_scan.ARG_COLUMNS names them). The first
 * N_COMMON_ARGS (the ids most events carry) have a slot in every row; the others (GPU ops' and
 * [memory] events' fields, whether shapes were recorded) are kept in "rare" rows, made only for
 * the events that have one of them: most events would leave them all MISSING, and writing those
 * took as much memory as the text itself. */
enum { A_EXTERNAL, A_EXTERNAL_LEGACY, A_CORRELATION, A_DEVICE, A_STREAM, A_BYTES, A_REGISTERS,
       A_SHARED_MEMORY, A_GRAPH_ID, A_GRID, A_BLOCK = A_GRID + 3, A_MEMORY = A_BLOCK + 3,
       A_SHAPES = A_MEMORY + 5, N_ARGS };
enum { N_COMMON_ARGS = A_DEVICE, N_RARE_ARGS = N_ARGS - N_COMMON_ARGS };

/* Phase codes: trace_schema.PHASE_CODE ("XiIMsftBEC" from 1; 0 for any other phase). */
static uint8_t phase_code(const char *s, Py_ssize_t n) {
    static const char phases[] = "XiIMsftBEC";
    if (n != 1) return 0;
    const char *at = memchr(phases, s[0], sizeof(phases) - 1);
    return at ? (uint8_t)(at - phases + 1) : 0;
}

/* ------------------------------------------------------------------ the columns */
/* Each column is a bytearray (handed to numpy without a copy), grown by doubling. */
enum { C_PHASE, C_SLOW, C_NAME, C_CAT, C_TS, C_DUR, C_PID, C_TID, C_ARGS_START, C_ARGS_END,
       C_ARGS, C_STACK, C_RARE_AT, N_ARRAYS };
static const Py_ssize_t ITEM_SIZE[N_ARRAYS] = {1, 1, 4, 4, 8, 8, 8, 8, 8, 8, 8 * N_COMMON_ARGS, 4, 4};

/* A pid or tid kept aside as its JSON text: (row, "pid"|"tid", text) for Python to read. */
typedef struct {
    Py_ssize_t row, offset, length;
    int tid;
} Odd;

typedef struct {
    Py_ssize_t count, capacity;
    PyObject *store[N_ARRAYS];
    uint8_t *phase, *slow;
    int32_t *name, *cat, *stack, *rare_at;
    int64_t *ts, *dur, *pid, *tid, *args_start, *args_end, *args;
    PyObject *rare_store;  /* the rare rows (N_RARE_ARGS values each), a bytearray grown by doubling */
    int64_t *rare;
    Py_ssize_t rare_count, rare_capacity;
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
    c->stack = at[C_STACK]; c->rare_at = at[C_RARE_AT];
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

static int resize_rare(Columns *c, Py_ssize_t capacity) {
    if (!c->rare_store && !(c->rare_store = PyByteArray_FromStringAndSize(NULL, 0))) return -1;
    if (PyByteArray_Resize(c->rare_store, capacity * N_RARE_ARGS * 8)) return -1;
    c->rare = (int64_t *)PyByteArray_AS_STRING(c->rare_store);
    c->rare_capacity = capacity;
    return 0;
}

/* The slot of args column ``column`` in row r: its own slot, or one in the row's rare row (made,
 * all MISSING, on its first use; taking the GIL back to grow them); NULL when out of memory. */
static inline int64_t *arg_slot(Columns *c, Py_ssize_t r, int column) {
    if (column < N_COMMON_ARGS) return c->args + r * N_COMMON_ARGS + column;
    if (c->rare_at[r] < 0) {
        if (c->rare_count == c->rare_capacity) {
            if (c->released) PyEval_RestoreThread(c->released);
            int failed = resize_rare(c, c->rare_capacity ? c->rare_capacity * 2 : 1024);
            if (failed) PyErr_Clear();
            if (c->released) c->released = PyEval_SaveThread();
            if (failed) return NULL;
        }
        int64_t *row = c->rare + c->rare_count * N_RARE_ARGS;
        for (int i = 0; i < N_RARE_ARGS; i++) row[i] = MISSING;
        c->rare_at[r] = (int32_t)c->rare_count++;
    }
    return c->rare + (Py_ssize_t)c->rare_at[r] * N_RARE_ARGS + (column - N_COMMON_ARGS);
}

static void free_columns(Columns *c) {
    Py_XDECREF(c->rare_store);
    for (int i = 0; i < N_ARRAYS; i++) Py_XDECREF(c->store[i]);
    free(c->odd);
}

/* The keys read, in the order of their columns (args) or field bits (events). */
#define KEY(text) {text, sizeof(text) - 1}
static const Key EVENT_KEYS[] = {KEY("ph"), KEY("cat"), KEY("name"), KEY("pid"), KEY("tid"),
                                 KEY("ts"), KEY("dur"), KEY("args")};
static const Key ARG_KEYS[] = {KEY("External id"), KEY("external id"), KEY("correlation"),
                               KEY("device"), KEY("stream"), KEY("bytes"),
                               KEY("registers per thread"), KEY("shared memory"), KEY("graph id"),
                               KEY("grid"), KEY("block"), KEY("Collective name"), KEY("Call stack"),
                               /* [memory] events' fields, into the columns from A_MEMORY on */
                               KEY("Bytes"), KEY("Device Id"), KEY("Total Allocated"),
                               KEY("Total Reserved"), KEY("Device Type"),
                               /* an operator's recorded shapes: only whether it has them */
                               KEY("Input Dims"), KEY("Input dims")};
enum { N_EVENT_KEYS = 8, K_GRID = 9, K_BLOCK, K_COLLECTIVE, K_CALL_STACK, K_MEMORY,
       K_INPUT_DIMS = K_MEMORY + 5, N_ARG_KEYS = K_INPUT_DIMS + 2 };

static KeyIndex EVENT_INDEX, ARG_INDEX;
static QuickKeys EVENT_QUICK, ARG_QUICK;


/* The args object of row r: its integer fields into the args columns; anything it does not read
 * whole marks the row slow. A [memory] field's column holds MISSING only where the field is
 * absent (Python adds a side-table entry for any value present): an explicit -1 marks it slow. */
static Status scan_args(Text *t, Columns *c, Strings *strings, Py_ssize_t r) {
    t->p++;
    skip_ws(t);
    if (t->p < t->end && *t->p == '}') { t->p++; return OK; }
    for (int guess = 0;;) {
        const char *k; Py_ssize_t n; int esc = 0, more; Status s;
        int key = quick_key(t, &ARG_QUICK, guess);
        if (key < 0) {
            if ((s = member_key(t, &k, &n, &esc))) return s;
            key = esc ? -1 : find_key(k, n, &ARG_INDEX, t->end);
        }
        guess = key + 1;
        int memory = key >= K_MEMORY && key < K_INPUT_DIMS;
        int column = key >= 0 && key < K_GRID ? key : memory ? A_MEMORY + key - K_MEMORY : -1;
        int triple = key == K_GRID ? A_GRID : key == K_BLOCK ? A_BLOCK : -1;
        if (key >= K_INPUT_DIMS) {  /* only whether it is there: the value is skipped below */
            int64_t *slot = arg_slot(c, r, A_SHAPES);
            if (!slot) return NO_MEMORY;
            *slot = 1;
        }
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
            if (is_int && !(memory && v == MISSING)) {
                int64_t *slot = arg_slot(c, r, column);
                if (!slot) return NO_MEMORY;
                *slot = v;
            } else {
                c->slow[r] = 1;
            }
        } else if (triple >= 0) {
            int ok;
            int64_t xyz[3] = {MISSING, MISSING, MISSING};
            if ((s = read_triple(t, xyz, &ok))) return s;
            if (!ok) {
                c->slow[r] = 1;
            } else {
                int64_t *slot = arg_slot(c, r, triple);
                if (!slot) return NO_MEMORY;
                memcpy(slot, xyz, sizeof(xyz));
            }
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
    for (int i = 0; i < N_COMMON_ARGS; i++) c->args[r * N_COMMON_ARGS + i] = MISSING;
    c->rare_at[r] = -1;
    int seen = 0, times_plain = 1;
    const char *odd_text[2] = {NULL, NULL};
    Py_ssize_t odd_length[2] = {0, 0};
    int odd_read[2] = {0, 0};
    t->p++;
    skip_ws(t);
    if (t->p < t->end && *t->p == '}') { t->p++; c->count++; return OK; }
    for (int guess = 0;;) {
        const char *k; Py_ssize_t n; int esc, more; Status s;
        int key = quick_key(t, &EVENT_QUICK, guess);
        if (key < 0) {
            if ((s = member_key(t, &k, &n, &esc))) return s;
            if (esc) return UNUSUAL;  /* a key that might decode to one of ours */
            key = find_key(k, n, &EVENT_INDEX, t->end);
        }
        guess = key + 1;
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
"cat, ts, dur, pid, tid, odd, slow, args_start, args_end, args, stack, rare_at, rare), each column a\n"
"bytearray of a uint8/int32/int64 array: args holds N_COMMON_ARGS values per event, rare N_ARGS -\n"
"N_COMMON_ARGS per rare row, rare_at each event's rare row (-1: none). None: read the piece the\n"
"Python way. ValueError '... (byte N)': not JSON.");

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
    if (s == OK && (resize(&c, c.count) || resize_rare(&c, c.rare_count) || !(odd = odd_list(&c, t.base))))
        s = FAILED;
    if (s == OK) {
        PyObject **k = c.store;
        result = Py_BuildValue("(nOOOOOOOOOOOOOOOO)", c.count, names, k[C_PHASE],
            k[C_NAME], k[C_CAT], k[C_TS], k[C_DUR], k[C_PID], k[C_TID], odd, k[C_SLOW],
            k[C_ARGS_START], k[C_ARGS_END], k[C_ARGS], k[C_STACK], k[C_RARE_AT], c.rare_store);
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
    "Trace events scanned straight into columns (see cuda_tracer/trace_json/scan.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    index_keys(&EVENT_INDEX, EVENT_KEYS, N_EVENT_KEYS);
    index_keys(&ARG_INDEX, ARG_KEYS, N_ARG_KEYS);
    index_quick_keys(&EVENT_QUICK, EVENT_KEYS, N_EVENT_KEYS);
    index_quick_keys(&ARG_QUICK, ARG_KEYS, N_ARG_KEYS);
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "N_ARGS", N_ARGS) ||
              PyModule_AddIntConstant(m, "N_COMMON_ARGS", N_COMMON_ARGS))) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
