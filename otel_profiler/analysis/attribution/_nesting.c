/* Nesting by time on one thread, in one pass (otel_profiler/analysis/attribution/time_nesting.py).
 *
 * The events come in start order (by thread, then start, longer first, operators before points).
 * Walking them with a stack of the chain of open operators, each event's parent is the innermost
 * operator still on the stack that encloses it (ends after it starts and not before it ends): the
 * ones that do not are popped, and enclose nothing later either. Points (launch calls placed at
 * their start) are given a parent and never pushed. This is what the numpy pointer jumping of
 * time_nesting.py computes, in O(n) instead of O(n log n) passes over arrays.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

PyDoc_STRVAR(enclosing_doc,
"enclosing(thread, start, end, is_point, out) -> None\n\n"
"For each event (int64 thread codes, start and end times, uint8 is_point, in start order): the\n"
"position of its innermost enclosing operator on its thread, or -1, into ``out`` (int64).");

static PyObject *enclosing(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "enclosing(thread, start, end, is_point, out)");
        return NULL;
    }
    Py_buffer b[5];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 5; got++)
        if (PyObject_GetBuffer(argv[got], &b[got], got == 4 ? PyBUF_WRITABLE : PyBUF_SIMPLE)) goto done;
    Py_ssize_t n = b[1].len / 8;
    if (b[0].len != n * 8 || b[1].len != n * 8 || b[2].len != n * 8 || b[3].len != n || b[4].len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "enclosing: the arrays differ in length");
        goto done;
    }
    const int64_t *thread = b[0].buf, *start = b[1].buf, *end = b[2].buf;
    const uint8_t *point = b[3].buf;
    int64_t *out = b[4].buf;
    int64_t *stack = malloc((n ? n : 1) * sizeof(int64_t));
    if (!stack) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t top = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && thread[i] != thread[i - 1]) top = 0;
        while (top) {
            int64_t p = stack[top - 1];
            if (end[p] < end[i] || end[p] <= start[i]) top--; else break;
        }
        out[i] = top ? stack[top - 1] : -1;
        if (!point[i]) stack[top++] = i;
    }
    Py_END_ALLOW_THREADS
    free(stack);
    result = Py_NewRef(Py_None);
done:
    while (got--) PyBuffer_Release(&b[got]);
    return result;
}

static PyMethodDef methods[] = {
    {"enclosing", (PyCFunction)(void (*)(void))enclosing, METH_FASTCALL, enclosing_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_nesting",
    "Each event's innermost enclosing operator, in one pass (see time_nesting.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__nesting(void) {
    return PyModule_Create(&module);
}
