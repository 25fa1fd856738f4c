/* The names-off validator's common case in one pass over a block of lines: a JSON
 * object whose keys are exactly a string-only format's fields, each value a string
 * within its bounds. For such a line it gives what the Python path computes for it:
 * the clean row as orjson writes it, the characters the statistics count and the
 * exact-dedup key (BLAKE2b-64 of the normalized fields). Non-ASCII text (raw UTF-8 or
 * \u escapes) is its own where every character is in the table Python gives it
 * (`plain_rows_unicode`: one whose NFKC form and case folding do not depend on its
 * neighbours). Any other line (other characters, surrogates, other types, whitespace
 * tricks it does not know) is left to Python: the answer for a line is either Python's
 * answer or "not mine", never a third one.
 *
 * Built by plain_rows.py with the system C compiler, with pii_rows.c (included at the
 * end: one translation unit); loaded through ctypes. */

#include <stdint.h>
#include <string.h>

/* ---- BLAKE2b (RFC 7693), 8-byte digest, no key: hashlib.blake2b(digest_size=8) ---- */

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#define G(a, b, c, d, x, y)           \
    do {                              \
        a = a + b + (x);              \
        d = rotr(d ^ a, 32);          \
        c = c + d;                    \
        b = rotr(b ^ c, 24);          \
        a = a + b + (y);              \
        d = rotr(d ^ a, 16);          \
        c = c + d;                    \
        b = rotr(b ^ c, 63);          \
    } while (0)

static void compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= t;
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = SIGMA[r];
        G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
        G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
        G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
        G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
        G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
        G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
        G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
        G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

uint64_t blake2b_64(const uint8_t *data, int64_t len) {
    uint64_t h[8];
    uint8_t block[128];
    memcpy(h, IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8; /* no key, 8-byte digest */
    int64_t done = 0;
    while (len - done > 128) {
        done += 128;
        compress(h, data + done - 128, (uint64_t)done, 0);
    }
    memset(block, 0, sizeof block);
    memcpy(block, data + done, (size_t)(len - done));
    compress(h, block, (uint64_t)len, 1);
    return h[0]; /* the digest's 8 bytes, read little-endian */
}

/* ---- one line ---- */

#define MAX_PAIRS 16

typedef struct {
    const uint8_t *key, *val; /* unescaped, in scratch */
    int64_t key_len, val_len;
} pair_t;


static inline int json_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Python's str.isspace() over ASCII: what str.strip() and str.split() remove. */
static inline int py_space(uint8_t c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31); }

/* Per BMP code point (set once by Python, before any scan; NULL: ASCII lines only):
 * 0 not ours; bit 0 ours; bit 1 its normalized form differs, that form being U_POOL at
 * bits 8-31, its length at bits 2-7 (never longer than the character's own UTF-8). */
static const uint32_t *U_TABLE;
static const uint8_t *U_POOL;

/* The SHA-256 of the sources it was built from (setup.py defines it): the loader runs a
 * library only when these match the sources installed beside it. */
#ifndef LLMOPS_SOURCES_SHA256
#define LLMOPS_SOURCES_SHA256 ""
#endif
const char *plain_rows_sources(void) { return LLMOPS_SOURCES_SHA256; }

/* Every entry is checked before the table is taken: a form longer than its character's
 * own UTF-8, or reaching past the pool, is refused (its code point returned; -1: taken),
 * so the copies from the pool stay inside it and inside the output. */
int64_t plain_rows_unicode(const uint32_t *table, const uint8_t *pool, int64_t pool_len) {
    U_TABLE = NULL;
    U_POOL = NULL;
    for (int64_t cp = 0; cp < 0x10000; cp++) {
        uint32_t e = table[cp];
        if (!e) continue;
        int64_t own = cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
        if (cp < 0x80 || (cp >= 0xD800 && cp < 0xE000)) return cp;
        if ((e & 2) && (!(e & 1) || (int64_t)((e >> 2) & 63) > own || (int64_t)(e >> 8) + ((e >> 2) & 63) > pool_len))
            return cp;
    }
    U_TABLE = table;
    U_POOL = pool;
    return -1;
}

static inline int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The code point of the strict UTF-8 sequence at q (lead byte >= 0x80) and its length in
 * *len; -1 for anything but a valid 2- or 3-byte sequence outside the surrogates. */
static inline int32_t utf8_bmp(const uint8_t *q, const uint8_t *end, int *len) {
    uint8_t c = q[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - q < 2 || (q[1] & 0xC0) != 0x80) return -1;
        *len = 2;
        return ((c & 0x1F) << 6) | (q[1] & 0x3F);
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - q < 3 || (q[1] & 0xC0) != 0x80 || (q[2] & 0xC0) != 0x80) return -1;
        int32_t cp = ((c & 0x0F) << 12) | ((q[1] & 0x3F) << 6) | (q[2] & 0x3F);
        if (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000)) return -1;
        *len = 3;
        return cp;
    }
    return -1; /* a 4-byte sequence (outside the table) or an invalid byte: Python's */
}

/* A JSON string at *p (just after its quote) unescaped into *w (UTF-8); 0 when not ours.
 * *ascii is cleared when it holds a character past ASCII. */
static int read_string(const uint8_t **p, const uint8_t *end, uint8_t **w, int *ascii) {
    const uint8_t *q = *p;
    uint8_t *o = *w;
    while (q < end) {
        uint8_t c = *q++;
        if (c == '"') {
            *p = q;
            *w = o;
            return 1;
        }
        if (c < 0x20) return 0; /* invalid JSON: Python says which error */
        if (c >= 0x80) {
            int len;
            int32_t cp = utf8_bmp(q - 1, end, &len);
            if (cp < 0 || !U_TABLE || !(U_TABLE[cp] & 1)) return 0;
            memcpy(o, q - 1, (size_t)len);
            o += len;
            q += len - 1;
            *ascii = 0;
            continue;
        }
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        if (q >= end) return 0;
        switch (*q++) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '/': *o++ = '/'; break;
            case 'b': *o++ = 8; break;
            case 'f': *o++ = 12; break;
            case 'n': *o++ = 10; break;
            case 'r': *o++ = 13; break;
            case 't': *o++ = 9; break;
            case 'u': {
                if (end - q < 4) return 0;
                int32_t cp = 0;
                for (int k = 0; k < 4; k++) {
                    int d = hex_digit(q[k]);
                    if (d < 0) return 0;
                    cp = (cp << 4) | d;
                }
                q += 4;
                if (cp < 0x80) {
                    *o++ = (uint8_t)cp;
                } else if (cp >= 0xD800 && cp < 0xE000) {
                    return 0; /* surrogates (pairs among them): Python's */
                } else {
                    if (!U_TABLE || !(U_TABLE[cp] & 1)) return 0;
                    if (cp < 0x800) {
                        *o++ = (uint8_t)(0xC0 | (cp >> 6));
                    } else {
                        *o++ = (uint8_t)(0xE0 | (cp >> 12));
                        *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    }
                    *o++ = (uint8_t)(0x80 | (cp & 0x3F));
                    *ascii = 0;
                }
                break;
            }
            default: return 0; /* invalid JSON: Python's */
        }
    }
    return 0;
}

/* Characters (code points) of UTF-8 text. */
static inline int64_t code_points(const uint8_t *s, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += (s[i] & 0xC0) != 0x80;
    return k;
}

/* orjson's escaping of a string (quotes included): UTF-8 as it is. */
static uint8_t *write_string(uint8_t *o, const uint8_t *s, int64_t n) {
    static const char hex[] = "0123456789abcdef";
    *o++ = '"';
    for (int64_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = c;
        } else if (c >= 0x20) {
            *o++ = c;
        } else {
            *o++ = '\\';
            switch (c) {
                case 8: *o++ = 'b'; break;
                case 9: *o++ = 't'; break;
                case 10: *o++ = 'n'; break;
                case 12: *o++ = 'f'; break;
                case 13: *o++ = 'r'; break;
                default:
                    *o++ = 'u';
                    *o++ = '0';
                    *o++ = '0';
                    *o++ = hex[c >> 4];
                    *o++ = hex[c & 15];
            }
        }
    }
    *o++ = '"';
    return o;
}

/* spec: [F, then per format: string_only, K, then per field: name_off, name_len, min, max] */
static int match_format(const int64_t *spec, const uint8_t *names, pair_t *pairs, int n, const int64_t **fields) {
    int64_t formats = spec[0];
    const int64_t *f = spec + 1;
    for (int64_t k = 0; k < formats; k++) {
        int64_t string_only = f[0], count = f[1];
        const int64_t *fs = f + 2;
        f = fs + 4 * count;
        if (count != n) continue;
        int same = 1;
        uint32_t seen = 0;
        for (int i = 0; i < n && same; i++) {
            int found = -1;
            for (int j = 0; j < count; j++) {
                if (fs[4 * j + 1] == pairs[i].key_len &&
                    memcmp(names + fs[4 * j], pairs[i].key, (size_t)pairs[i].key_len) == 0) {
                    found = j;
                    break;
                }
            }
            if (found < 0 || (seen >> found) & 1u) same = 0; /* another key, or one twice */
            else seen |= 1u << found;
        }
        if (!same) continue;
        if (!string_only) return -1; /* the first format with these keys decides */
        *fields = fs;
        return (int)k;
    }
    return -1;
}

/* dedup.normalize: each character's NFKC form case-folded (ASCII: lower case; past
 * ASCII: the table's form, never holding whitespace), whitespace runs to one space,
 * stripped. */
static uint8_t *normalize(uint8_t *o, const uint8_t *s, int64_t n) {
    int pending = 0, any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (py_space(c)) {
            pending = any;
            continue;
        }
        if (pending) *o++ = ' ';
        pending = 0;
        any = 1;
        if (c < 0x80) {
            *o++ = (c >= 'A' && c <= 'Z') ? (uint8_t)(c + 32) : c;
            continue;
        }
        int len;
        uint32_t e = U_TABLE[utf8_bmp(s + i, s + n, &len)]; /* read_string let only these in */
        if (e & 2) {
            memcpy(o, U_POOL + (e >> 8), (e >> 2) & 63);
            o += (e >> 2) & 63;
        } else {
            memcpy(o, s + i, (size_t)len);
            o += len;
        }
        i += len - 1;
    }
    return o;
}

/* -1: not ours; else the format's index, with the line's pairs (unescaped into `scratch`),
 * the characters the statistics count and the exact-dedup key. */
static int parse_plain(const uint8_t *p, const uint8_t *end, const int64_t *spec, const uint8_t *names,
                       uint8_t *scratch, pair_t *pairs, int *count, int64_t *chars, uint64_t *key, int *ascii) {
    if (memchr(p, 0, (size_t)(end - p))) return -1;
    *ascii = 1;
    int n = 0;
    uint8_t *w = scratch;
    while (p < end && json_ws(*p)) p++;
    if (p >= end || *p++ != '{') return -1;
    while (p < end && json_ws(*p)) p++;
    if (p < end && *p == '}') return -1; /* {}: no format's keys */
    for (;;) {
        if (n == MAX_PAIRS || p >= end || *p++ != '"') return -1;
        pairs[n].key = w;
        if (!read_string(&p, end, &w, ascii)) return -1;
        pairs[n].key_len = w - pairs[n].key;
        while (p < end && json_ws(*p)) p++;
        if (p >= end || *p++ != ':') return -1;
        while (p < end && json_ws(*p)) p++;
        if (p >= end || *p++ != '"') return -1; /* not a string value */
        pairs[n].val = w;
        if (!read_string(&p, end, &w, ascii)) return -1;
        pairs[n].val_len = w - pairs[n].val;
        n++;
        while (p < end && json_ws(*p)) p++;
        if (p >= end) return -1;
        if (*p == ',') {
            p++;
            while (p < end && json_ws(*p)) p++;
            continue;
        }
        if (*p++ != '}') return -1;
        break;
    }
    while (p < end && json_ws(*p)) p++;
    if (p != end) return -1;

    const int64_t *fields;
    int fmt = match_format(spec, names, pairs, n, &fields);
    if (fmt < 0) return -1;
    /* Bounds in the format's field order, as Python checks them. */
    int order[MAX_PAIRS];
    int64_t total = 0;
    for (int j = 0; j < n; j++) {
        const int64_t *fs = fields + 4 * j;
        int i = 0;
        while (pairs[i].key_len != fs[1] || memcmp(names + fs[0], pairs[i].key, (size_t)fs[1]) != 0) i++;
        order[j] = i;
        const uint8_t *v = pairs[i].val;
        int64_t bytes = pairs[i].val_len, len = *ascii ? bytes : code_points(v, bytes);
        if (len > fs[3]) return -1;
        if (fs[2] > 0) {
            int64_t a = 0, b = bytes; /* the table holds no whitespace past ASCII */
            while (a < b && py_space(v[a])) a++;
            while (b > a && py_space(v[b - 1])) b--;
            if ((*ascii ? b - a : code_points(v + a, b - a)) < fs[2]) return -1;
        }
        total += len;
    }
    /* The dedup text: the normalized fields joined by \x1f, in format order. */
    uint8_t *t = w, *u = w;
    for (int j = 0; j < n; j++) {
        if (j) *u++ = 0x1f;
        u = normalize(u, pairs[order[j]].val, pairs[order[j]].val_len);
    }
    uint64_t k = blake2b_64(t, u - t);
    *key = k ? k : 1;
    *chars = total;
    *count = n;
    return fmt;
}

/* The row as orjson writes it, keys in input order, newline ended; `vals`/`lens` (when
 * not NULL) replace the values. */
static uint8_t *write_row(uint8_t *o, const pair_t *pairs, int n, const uint8_t *const *vals, const int64_t *lens) {
    *o++ = '{';
    for (int i = 0; i < n; i++) {
        if (i) *o++ = ',';
        o = write_string(o, pairs[i].key, pairs[i].key_len);
        *o++ = ':';
        o = vals ? write_string(o, vals[i], lens[i]) : write_string(o, pairs[i].val, pairs[i].val_len);
    }
    *o++ = '}';
    *o++ = '\n';
    return o;
}

/* Lines of `buf` (joined by \n, none inside one). For line i: status[i] its format or -1;
 * its clean row at out[offsets[i]:offsets[i + 1]] (empty when -1), chars[i] and keys[i].
 * `out` holds len + lines bytes, `scratch` 2 * (longest line + 1). Returns the lines. */
int64_t plain_rows(const uint8_t *buf, int64_t len, const int64_t *spec, const uint8_t *names, int32_t *status,
                   int64_t *chars, uint64_t *keys, uint8_t *out, int64_t *offsets, uint8_t *scratch) {
    int64_t i = 0, start = 0;
    uint8_t *o = out;
    offsets[0] = 0;
    for (;;) {
        const uint8_t *nl = memchr(buf + start, '\n', (size_t)(len - start));
        int64_t stop = nl ? nl - buf : len;
        pair_t pairs[MAX_PAIRS];
        int n, ascii;
        int fmt = parse_plain(buf + start, buf + stop, spec, names, scratch, pairs, &n, &chars[i], &keys[i], &ascii);
        if (fmt < 0) {
            chars[i] = 0;
            keys[i] = 0;
        } else {
            o = write_row(o, pairs, n, NULL, NULL);
        }
        status[i] = fmt;
        offsets[++i] = o - out;
        if (!nl) break;
        start = stop + 1;
    }
    return i;
}

#include "pii_rows.c"
