/* The keys of the objects the scanner reads, looked up without a Python object
 * (cuda_tracer/trace_json/_scan.c uses these):
 *   - find_key: a key's id in its set, from its raw text (chained by length, compared as one word
 *     where it can be);
 *   - quick_key: the common case in one step: a key of the set written plainly, its quotes and
 *     colon included ("ph":), compared as one or two words against the text itself, which saves
 *     scanning it as a string first. Anything else (another key, an escape, a space before the
 *     colon, the text's last bytes) is left to member_key and find_key.
 */
#ifndef CUDA_TRACER_SCAN_KEYS_H
#define CUDA_TRACER_SCAN_KEYS_H

#include "_scan_json.h"

/* A key: its raw text (no escapes). */
typedef struct {
    const char *name;
    Py_ssize_t length;
} Key;

/* The keys of one set chained by length, so that a look-up compares only keys of the key's length
 * (most members of an event's args are no key of ours, and most lengths have none). */
#define MAX_KEY_LENGTH 31
typedef struct {
    const Key *keys;
    int8_t head[MAX_KEY_LENGTH + 1], next[32];
    uint64_t word[32];  /* each key's first eight bytes, zero-padded */
} KeyIndex;

static void index_keys(KeyIndex *index, const Key *keys, int count) {
    index->keys = keys;
    memset(index->head, -1, sizeof(index->head));
    for (int i = count - 1; i >= 0; i--) {  /* each chain in the set's order */
        index->next[i] = index->head[keys[i].length];
        index->head[keys[i].length] = (int8_t)i;
        index->word[i] = 0;
        memcpy(&index->word[i], keys[i].name, keys[i].length < 8 ? keys[i].length : 8);
    }
}

/* The key's id in ``index``, or -1. ``end`` ends the text: a key of up to eight bytes is compared
 * as one word where eight bytes can be read from its start (a key is followed by its quote). */
static inline int find_key(const char *k, Py_ssize_t n, const KeyIndex *index, const char *end) {
    if (n > MAX_KEY_LENGTH || index->head[n] < 0) return -1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n <= 8 && end - k >= 8) {
        uint64_t w;
        memcpy(&w, k, 8);
        if (n < 8) w &= (((uint64_t)1) << (8 * n)) - 1;  /* the first n bytes (little-endian) */
        for (int i = index->head[n]; i >= 0; i = index->next[i])
            if (index->word[i] == w) return i;
        return -1;
    }
#endif
    for (int i = index->head[n]; i >= 0; i = index->next[i])
        if (!memcmp(index->keys[i].name, k, n)) return i;
    return -1;
}

/* A key as it is written ("key":, quotes and colon included) in two words, with the masks of its
 * bytes; length 0: too long to be matched so (more than 16 bytes). */
typedef struct {
    uint64_t word[2], mask[2];
    Py_ssize_t length;
} QuickKey;

#define MAX_QUICK_KEYS 32
typedef struct {
    QuickKey keys[MAX_QUICK_KEYS];
    int count;
} QuickKeys;

static void index_quick_keys(QuickKeys *quick, const Key *keys, int count) {
    quick->count = count;
    for (int i = 0; i < count; i++) {
        QuickKey *q = &quick->keys[i];
        char text[16] = {0};
        Py_ssize_t n = keys[i].length + 3;
        memset(q, 0, sizeof(*q));
        if (n > 16) continue;
        text[0] = '"';
        memcpy(text + 1, keys[i].name, keys[i].length);
        text[n - 2] = '"';
        text[n - 1] = ':';
        memcpy(q->word, text, 16);
        for (Py_ssize_t b = 0; b < n; b++) ((unsigned char *)q->mask)[b] = 0xFF;
        q->length = n;
    }
}

static inline int quick_key_at(const uint64_t *w, const QuickKey *q) {
    return q->length && (w[0] & q->mask[0]) == q->word[0] && (w[1] & q->mask[1]) == q->word[1];
}

/* The id of the key written plainly at t->p (see the header), t->p then at its value; -1 (t->p
 * unchanged) for anything else. ``guess``: the key tried first (the one that usually comes next). */
static inline int quick_key(Text *t, const QuickKeys *quick, int guess) {
    if (t->end - t->p < 16 || *t->p != '"') return -1;
    uint64_t w[2];
    memcpy(w, t->p, 16);
    int found = -1;
    if (guess >= 0 && guess < quick->count && quick_key_at(w, &quick->keys[guess])) {
        found = guess;
    } else {
        for (int i = 0; i < quick->count && found < 0; i++)
            if (quick_key_at(w, &quick->keys[i])) found = i;
    }
    if (found >= 0) {
        t->p += quick->keys[found].length;
        skip_ws(t);
    }
    return found;
}

#endif  /* CUDA_TRACER_SCAN_KEYS_H */
