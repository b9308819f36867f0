/* JSON values read from a trace's text, with no Python object (cuda_tracer/trace_json/_scan.c uses these):
 * whitespace, strings (checked, their escapes not decoded), numbers (checked against the JSON
 * grammar), any value skipped to its end, and the values the scanner reads: plain integers, pids
 * and tids as trace_columns.to_int reads them, exact decimal times, [x, y, z] triples.
 *
 * A function returns INVALID when the text is not JSON (the first such place is kept in
 * Text.error_at), UNUSUAL for JSON the scanner leaves to the Python reader. */
#ifndef CUDA_TRACER_SCAN_JSON_H
#define CUDA_TRACER_SCAN_JSON_H

#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MISSING (-1)
#define MAX_DEPTH 256
#define TIME_LIMIT_NS (((int64_t)1) << 62)
#define WHOLE_LIMIT (TIME_LIMIT_NS / 1000)

typedef enum { OK = 0, UNUSUAL = 1, INVALID = 2, FAILED = 3, NO_MEMORY = 4 } Status;

typedef struct {
    const char *base, *p, *end;
    const char *error_at;
} Text;

static inline void skip_ws(Text *t) {
    if (t->p < t->end && (unsigned char)*t->p > ' ') return;
    if (t->end - t->p >= 2 && t->p[0] == ' ' && (unsigned char)t->p[1] > ' ') {  /* ", " and ": " */
        t->p++;
        return;
    }
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

/* The first byte at or after q that ends a string's plain run, looking sixteen bytes at a time
 * (SSE2, which every x86-64 has) or eight at a time elsewhere; at most ``end``'s last 15 bytes are
 * left to the caller's byte loop. */
static inline const char *plain_run_end(const char *q, const char *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                  control = _mm_set1_epi8(0x1F);
    while (end - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                    _mm_cmpeq_epi8(_mm_min_epu8(v, control), v));  /* v <= 0x1F */
        int mask = _mm_movemask_epi8(stop);
        if (mask) return q + __builtin_ctz((unsigned)mask);
        q += 16;
    }
#else
    while (end - q >= 8 && plain_eight(q)) q += 8;
#endif
    return q;
}

/* A string at t->p (its opening quote): [*start, *start + *len) is its raw content. */
static Status scan_string(Text *t, const char **start, Py_ssize_t *len, int *escaped) {
    const char *p = t->p + 1;
    *escaped = 0;
    for (;;) {
        const char *q = plain_run_end(p, t->end);
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

/* The digits of a number at p (after an optional minus sign): their count (0: none, or more than
 * 18, or a leading zero before another digit: cases the full path reads) and value. */
static inline Py_ssize_t plain_digits(const char **at, const char *end, uint64_t *value) {
    const char *p = *at, *digits = p;
    uint64_t v = 0;
    while (p < end && (unsigned)(*p - '0') < 10u) {
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
    }
    Py_ssize_t n = p - digits;
    if (n > 18 || (n > 1 && *digits == '0')) return 0;
    *at = p;
    *value = v;
    return n;
}

/* The common case of read_int, in one pass: -?digits, at most 18, with no fraction or exponent.
 * 0 (nothing read) for anything else, which read_int's full path then reads and checks. */
static inline int quick_int(Text *t, int64_t *out) {
    const char *p = t->p;
    int negative = p < t->end && *p == '-';
    p += negative;
    uint64_t v;
    if (!plain_digits(&p, t->end, &v) || (p < t->end && (*p == '.' || *p == 'e' || *p == 'E')))
        return 0;
    t->p = p;
    *out = negative ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* A plain integer value (-?digits, at most 18 of them) into *out; *is_int 0 for any other value
 * (skipped). */
static Status read_int(Text *t, int64_t *out, int *is_int) {
    const char *p;
    int negative, plain, found;
    *is_int = quick_int(t, out);
    if (*is_int) return OK;
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

/* The common case of read_time, in one pass: -?digits[.digits] (each at most 18 digits, no
 * exponent) within the limits; 0 (nothing read) for anything else, which the full path reads. */
static inline int quick_time(Text *t, int64_t *ns) {
    const char *p = t->p;
    int negative = p < t->end && *p == '-';
    p += negative;
    uint64_t whole, frac = 0;
    if (!plain_digits(&p, t->end, &whole)) return 0;
    int frac_digits = 0;
    if (p < t->end && *p == '.') {
        const char *first = ++p;
        while (p < t->end && (unsigned)(*p - '0') < 10u) {
            if (p - first < 3) frac = frac * 10 + (uint64_t)(*p - '0');
            p++;
        }
        frac_digits = (int)(p - first);
        if (!frac_digits || frac_digits > 18) return 0;
    }
    if (p < t->end && (*p == 'e' || *p == 'E')) return 0;
    for (int d = frac_digits; d < 3; d++) frac *= 10;
    if (whole >= (uint64_t)WHOLE_LIMIT) return 0;
    int64_t v = (int64_t)whole * 1000 + (int64_t)frac;
    if (v >= TIME_LIMIT_NS) return 0;
    t->p = p;
    *ns = negative ? -v : v;
    return 1;
}

/* A plain decimal time (µs) as exact ns, as trace_times.decimal_ns: *ok 0 for any other value. */
static Status read_time(Text *t, int64_t *ns, int *ok) {
    const char *p;
    int negative, plain, found;
    *ok = quick_time(t, ns);
    if (*ok) return OK;
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
#endif  /* CUDA_TRACER_SCAN_JSON_H */
