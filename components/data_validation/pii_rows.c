/* Names off, a plain candidate row (ASCII, string fields only: plain_rows.c's) judged in C:
 * pii.find_pii on each value, the density and secret verdicts, redaction and the clean
 * row, as the Python path (pii_scan.py) computes them. The recognizers' regexes are not written
 * here: regex_program.py parses each pattern (pii.py) as Python's `re` reads it into a
 * program for the backtracking matcher below, which tries alternatives in the order
 * Python's engine does, so a match is the one `re` finds. The validators (Luhn, issuer
 * prefixes, GB 11643, IBAN mod-97, IPv6 parts) follow pii.py line by line; anything this
 * file does not do (a JWT's header, a row to quarantine, an oversized row) is declined
 * and judged in Python: the answer for a row is Python's or "not mine".
 *
 * Included at the end of plain_rows.c (one translation unit, one library): it uses that
 * file's line parser and writer. */

/* ---- the matcher ---- */

enum { OP_CHAR, OP_SPLIT, OP_JMP, OP_SAVE, OP_MATCH, OP_ASSERT, OP_BACKREF, OP_AT };
enum { AT_BOUNDARY, AT_END, AT_END_STRING };
#define SLOTS 8 /* groups 0..3 */
#define OVERFLOW (-2)

typedef struct {
    int32_t pc, pos, slot, old;
} entry_t;

typedef struct {
    const int32_t *code;
    const uint8_t *sets; /* 16 bytes a set: ASCII bitmaps */
    entry_t *stack;
    int32_t room;
} vm_t;

static inline int in_set(const uint8_t *sets, int32_t k, uint8_t c) {
    return c < 128 && (sets[16 * k + (c >> 3)] >> (c & 7)) & 1;
}

static inline int is_word(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* The end of the first match of the program at `pc` from `pos` in s[0:end] (what `re`
 * calls endpos; lookbehinds see back to 0), -1 for none, OVERFLOW when out of stack. */
static int32_t run(const vm_t *V, int32_t base, int32_t pc, const uint8_t *s, int32_t end, int32_t pos,
                   int32_t *caps) {
    entry_t *st = V->stack + base;
    int32_t room = V->room - base, sp = 0;
    const int32_t *c = V->code;
    for (;;) {
        switch (c[pc]) {
            case OP_CHAR:
                if (pos < end && in_set(V->sets, c[pc + 1], s[pos])) {
                    pos++;
                    pc += 2;
                    continue;
                }
                break;
            case OP_SPLIT:
                if (sp >= room) return OVERFLOW;
                st[sp++] = (entry_t){c[pc + 2], pos, -1, 0};
                pc = c[pc + 1];
                continue;
            case OP_JMP:
                pc = c[pc + 1];
                continue;
            case OP_SAVE:
                if (sp >= room) return OVERFLOW;
                st[sp++] = (entry_t){0, 0, c[pc + 1], caps[c[pc + 1]]};
                caps[c[pc + 1]] = pos;
                pc += 2;
                continue;
            case OP_MATCH:
                return pos;
            case OP_ASSERT: { /* negate, width (-1: ahead), sub, next */
                int32_t inner[SLOTS], r = -1, width = c[pc + 2];
                for (int i = 0; i < SLOTS; i++) inner[i] = -1;
                if (width < 0) r = run(V, base + sp, c[pc + 3], s, end, pos, inner);
                else if (pos >= width) r = run(V, base + sp, c[pc + 3], s, end, pos - width, inner);
                if (r == OVERFLOW) return OVERFLOW;
                if ((r >= 0) != c[pc + 1]) {
                    pc = c[pc + 4];
                    continue;
                }
                break;
            }
            case OP_BACKREF: {
                int32_t a = caps[2 * c[pc + 1]], b = caps[2 * c[pc + 1] + 1];
                if (a >= 0 && b >= a && pos + (b - a) <= end && memcmp(s + a, s + pos, (size_t)(b - a)) == 0) {
                    pos += b - a;
                    pc += 2;
                    continue;
                }
                break;
            }
            case OP_AT: {
                int ok;
                if (c[pc + 1] == AT_BOUNDARY)
                    ok = end > 0 && (pos > 0 && is_word(s[pos - 1])) != (pos < end && is_word(s[pos]));
                else if (c[pc + 1] == AT_END)
                    ok = pos == end || (pos + 1 == end && s[pos] == '\n');
                else
                    ok = pos == end;
                if (ok) {
                    pc += 2;
                    continue;
                }
                break;
            }
            default:
                return OVERFLOW;
        }
        for (;;) { /* backtrack */
            if (sp == 0) return -1;
            entry_t e = st[--sp];
            if (e.slot >= 0) {
                caps[e.slot] = e.old;
                continue;
            }
            pc = e.pc;
            pos = e.pos;
            break;
        }
    }
}

/* `pattern.search(s, from, end)`: the match's end (its start in *start, groups in caps).
 * `first`: the set every match starts with (-1: none known); other positions are skipped. */
static int32_t search(const vm_t *V, int32_t pc, int32_t first, const uint8_t *s, int32_t end, int32_t from,
                      int32_t *caps, int32_t *start) {
    for (int32_t p = from; p <= end; p++) {
        if (first >= 0 && (p == end || !in_set(V->sets, first, s[p]))) continue;
        for (int i = 0; i < SLOTS; i++) caps[i] = -1;
        int32_t e = run(V, 0, pc, s, end, p, caps);
        if (e == OVERFLOW) return OVERFLOW;
        if (e >= 0) {
            *start = p;
            return e;
        }
    }
    return -1;
}

/* ---- the recognizers' configuration (pii_rows.py builds it from pii.py) ---- */

enum { V_WHOLE, V_GROUP1, V_PHONE, V_CARD, V_IPV4, V_IPV6, V_IBAN, V_CN_ID, V_SSN, V_JWT, V_BEARER };
/* Programs, in pii_rows.PROGRAMS' order. */
enum { P_RUN, P_NUMERIC, P_NEGATIVE = P_NUMERIC + 7, P_EMAIL, P_EMAIL_LEFT, P_IPV6, P_IBAN, P_ANCHOR, P_SECRETS };
#define N_SECRETS 5
#define N_PROGRAMS (P_SECRETS + N_SECRETS)
#define N_TYPES 14
#define SECRET_BIT 14 /* the secret family's bit in a line's kinds (the others: type ids) */
#define MAX_FOUND 256
#define DECLINE (-3)

typedef struct {
    int32_t entry[N_PROGRAMS], first[N_PROGRAMS]; /* first instruction, the set a match starts with */
    int32_t type[N_PROGRAMS], priority[N_PROGRAMS], validator[N_PROGRAMS];
    int32_t plan[7][4];         /* numeric: min digits, one of two characters (0: none), min dots */
    int32_t numeric_types;      /* kinds bits of the numeric family */
    int32_t secret_types;       /* type bits that are secrets */
    int32_t email, ipv6, iban;  /* type ids */
    int32_t gates[N_SECRETS][5][2]; /* per secret: up to 5 needles as (offset, length) in needles */
    int32_t tokens[N_TYPES][2];     /* per type: its redaction token in needles (offset, length) */
    int32_t iban_length[26 * 26];
    int32_t weights[17];
    uint8_t check[12];
} conf_t;

typedef struct {
    int32_t priority, start, end, type;
} found_t;

/* JWT headers Python decoded for a call (pii._jwt_header_ok): n token heads, sorted as
 * bytes sort, head i at heads[offsets[i]:offsets[i + 1]], ok[i] its verdict. */
typedef struct {
    const uint8_t *heads;
    const int64_t *offsets;
    const uint8_t *ok;
    int64_t n;
} jwt_t;

typedef struct {
    const vm_t *vm;
    const conf_t *cf;
    const uint8_t *needles;
    found_t *found;
    int32_t n;
    const jwt_t *jwt;
} scan_t;

/* The verdict on a JWT whose head (up to its first '.') is h[0:k]: 1, 0, or DECLINE when
 * Python was not asked. */
static int jwt_verdict(const jwt_t *jwt, const uint8_t *h, int64_t k) {
    int64_t lo = 0, hi = jwt ? jwt->n : 0;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2, m = jwt->offsets[mid + 1] - jwt->offsets[mid];
        int c = memcmp(jwt->heads + jwt->offsets[mid], h, (size_t)(m < k ? m : k));
        if (c == 0) c = (m > k) - (m < k);
        if (c == 0) return jwt->ok[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return DECLINE;
}

static int has(const uint8_t *s, int32_t n, const uint8_t *needle, int32_t k) {
    if (k == 0) return 1;
    for (int32_t i = 0; i + k <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, (size_t)k) == 0) return 1;
    return 0;
}

static int add(scan_t *S, int32_t priority, int32_t a, int32_t b, int32_t type) {
    if (S->n == MAX_FOUND) return DECLINE;
    S->found[S->n++] = (found_t){priority, a, b, type};
    return 0;
}

/* _NEGATIVE_PREFIX.search(text, max(0, start - 40), start) */
static int negative_context(scan_t *S, const uint8_t *s, int32_t start) {
    int32_t caps[SLOTS], at;
    const conf_t *cf = S->cf;
    return search(S->vm, cf->entry[P_NEGATIVE], cf->first[P_NEGATIVE], s, start, start > 40 ? start - 40 : 0, caps,
                  &at);
}

static int luhn_valid(const uint8_t *d, int32_t n) {
    int total = 0;
    for (int32_t i = 0; i < n; i++) {
        int v = d[n - 1 - i] - '0';
        if (i & 1) v = v > 4 ? v * 2 - 9 : v * 2;
        total += v;
    }
    return total % 10 == 0;
}

static int num(const uint8_t *d, int k) {
    int v = 0;
    for (int i = 0; i < k; i++) v = v * 10 + (d[i] - '0');
    return v;
}

static int card_issuer_ok(const uint8_t *d, int32_t n) {
    int p2 = num(d, 2), p3 = num(d, 3), p4 = num(d, 4);
    if (d[0] == '4') return n == 13 || n == 16 || n == 19;
    if ((51 <= p2 && p2 <= 55) || (2221 <= p4 && p4 <= 2720)) return n == 16;
    if (p2 == 34 || p2 == 37) return n == 15;
    if (p4 == 6011 || p2 == 65 || (644 <= p3 && p3 <= 649)) return 16 <= n && n <= 19;
    if (3528 <= p4 && p4 <= 3589) return 16 <= n && n <= 19;
    if (p2 == 36 || p2 == 38 || p2 == 39 || (300 <= p3 && p3 <= 305)) return 14 <= n && n <= 19;
    if (p2 == 62) return 16 <= n && n <= 19;
    if (p2 == 50 || p2 == 56 || p2 == 57 || p2 == 58 || p2 == 63 || p2 == 67) return 12 <= n && n <= 19;
    return 0;
}

static inline int is_alnum(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static inline int is_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static inline uint8_t upper(uint8_t c) { return c >= 'a' && c <= 'z' ? (uint8_t)(c - 32) : c; }

static int iban_length(const conf_t *cf, uint8_t a, uint8_t b) {
    if (a < 'A' || a > 'Z' || b < 'A' || b > 'Z') return 0;
    return cf->iban_length[(a - 'A') * 26 + (b - 'A')];
}

/* pii._iban: the span, or 0. */
static int iban(const conf_t *cf, const uint8_t *s, int32_t n, int32_t m0, int32_t *stop) {
    int32_t want = iban_length(cf, s[m0], s[m0 + 1]);
    if (!want) return 0;
    uint8_t chars[64];
    int32_t got = 0, i = m0;
    if (want > 64) return 0;
    while (i < n && got < want) {
        uint8_t ch = s[i];
        if (is_alnum(ch)) chars[got++] = upper(ch);
        else if (ch != ' ' || i + 1 >= n || s[i + 1] == ' ') break;
        i++;
    }
    if (got != want || (i < n && is_alnum(s[i]))) return 0;
    if (iban_length(cf, chars[0], chars[1]) != got) return 0;
    int r = 0;
    for (int32_t k = 0; k < got; k++) {
        uint8_t ch = chars[(k + 4) % got];
        int v = ch <= '9' ? ch - '0' : ch - 'A' + 10;
        r = v < 10 ? (r * 10 + v) % 97 : (r * 100 + v) % 97;
    }
    *stop = i;
    return r == 1;
}

static int cn_id_valid(const conf_t *cf, const uint8_t *s) {
    int total = 0;
    for (int i = 0; i < 17; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        total += (s[i] - '0') * cf->weights[i];
    }
    if (cf->check[total % 11] != upper(s[17])) return 0;
    int y = num(s + 6, 4), m = num(s + 10, 2), d = num(s + 12, 2);
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || m < 1 || m > 12 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[m - 1] + (m == 2 && leap);
}

/* ipaddress.IPv6Address(s[a:b]) succeeds (the candidate holds hex digits and colons). */
static int ipv6_valid(const uint8_t *s, int32_t a, int32_t b) {
    int32_t start[16], len[16], parts = 0, p = a;
    for (;;) {
        int32_t q = p;
        while (q < b && s[q] != ':') q++;
        if (parts == 16) return 0;
        start[parts] = p;
        len[parts++] = q - p;
        if (q == b) break;
        p = q + 1;
    }
    if (parts < 3 || parts > 9) return 0;
    int32_t skip = -1, hi, lo;
    for (int32_t i = 1; i < parts - 1; i++)
        if (!len[i]) {
            if (skip >= 0) return 0;
            skip = i;
        }
    if (skip >= 0) {
        hi = skip;
        lo = parts - skip - 1;
        if (!len[0] && --hi) return 0;
        if (!len[parts - 1] && --lo) return 0;
        if (8 - (hi + lo) < 1) return 0;
    } else {
        if (parts != 8 || !len[0] || !len[parts - 1]) return 0;
        hi = parts;
        lo = 0;
    }
    for (int32_t i = 0; i < parts; i++) {
        if (i >= hi && i < parts - lo) continue;
        if (len[i] < 1 || len[i] > 4) return 0;
        for (int32_t k = 0; k < len[i]; k++)
            if (!is_hex(s[start[i] + k])) return 0;
    }
    return 1;
}

static int any_digit(const uint8_t *s, int32_t a, int32_t b) {
    for (int32_t i = a; i < b; i++)
        if (s[i] >= '0' && s[i] <= '9') return 1;
    return 0;
}

/* Python's str.islower() / isupper() over ASCII. */
static int cased(const uint8_t *s, int32_t a, int32_t b, int want_lower) {
    int any = 0;
    for (int32_t i = a; i < b; i++) {
        if (s[i] >= 'a' && s[i] <= 'z') {
            if (!want_lower) return 0;
            any = 1;
        } else if (s[i] >= 'A' && s[i] <= 'Z') {
            if (want_lower) return 0;
            any = 1;
        }
    }
    return any;
}

/* A recognizer's validator on its match [a, b) (groups in caps): 1 with the span, 0 none,
 * DECLINE: Python's to judge. */
static int validate(scan_t *S, int32_t p, const uint8_t *s, int32_t n, int32_t a, int32_t b, const int32_t *caps,
                    int32_t *x, int32_t *y) {
    *x = a;
    *y = b;
    switch (S->cf->validator[p]) {
        case V_WHOLE:
            return 1;
        case V_GROUP1:
            *x = caps[2];
            *y = caps[3];
            return caps[2] >= 0;
        case V_PHONE: {
            int32_t d = 0;
            for (int32_t i = a; i < b; i++)
                if (!strchr(" ().-+Xx", s[i])) d++;
            if (d < 8 || d > 15) return 0;
            int r = negative_context(S, s, a);
            return r == OVERFLOW ? DECLINE : r < 0;
        }
        case V_CARD: {
            uint8_t d[64];
            int32_t k = 0;
            for (int32_t i = a; i < b && k < 64; i++)
                if (s[i] != ' ' && s[i] != '-') d[k++] = s[i];
            if (k < 12 || k > 19 || !card_issuer_ok(d, k) || !luhn_valid(d, k)) return 0;
            int r = negative_context(S, s, a);
            return r == OVERFLOW ? DECLINE : r < 0;
        }
        case V_IPV4:
        case V_SSN: {
            int r = negative_context(S, s, a);
            return r == OVERFLOW ? DECLINE : r < 0;
        }
        case V_IPV6: {
            int32_t groups = 0;
            for (int32_t i = a; i < b; i++)
                if (s[i] != ':' && (i == a || s[i - 1] == ':')) groups++;
            return groups >= 3 && ipv6_valid(s, a, b);
        }
        case V_IBAN:
            return iban(S->cf, s, n, a, y);
        case V_CN_ID:
            return b - a == 18 && cn_id_valid(S->cf, s + a);
        case V_JWT:
            if (a && (is_alnum(s[a - 1]) || s[a - 1] == '_' || s[a - 1] == '-')) return 0;
            {
                int32_t h = a;
                while (h < b && s[h] != '.') h++;
                return jwt_verdict(S->jwt, s + a, h - a); /* the header was decoded in Python */
            }
        case V_BEARER: {
            int32_t ta = caps[2], tb = caps[3];
            if (ta < 0) return 0;
            int random = any_digit(s, ta, tb) || (tb - ta >= 20 && !cased(s, ta, tb, 1) && !cased(s, ta, tb, 0));
            *x = ta;
            *y = tb;
            return random;
        }
    }
    return DECLINE;
}

/* Every match of program p in s[from:end] (`finditer`), validated, into S. `nonempty`:
 * pii._scan's rule that a span must not be empty. */
static int scan_all(scan_t *S, int32_t p, const uint8_t *s, int32_t n, int32_t from, int32_t end, int nonempty) {
    int32_t caps[SLOTS], a = 0, b, x, y;
    const conf_t *cf = S->cf;
    while (from <= end) {
        b = search(S->vm, cf->entry[p], cf->first[p], s, end, from, caps, &a);
        if (b == OVERFLOW) return DECLINE;
        if (b < 0) return 0;
        if (b == a) return DECLINE; /* an empty match: not a case this file follows */
        int r = validate(S, p, s, n, a, b, caps, &x, &y);
        if (r == DECLINE) return DECLINE;
        if (r && (!nonempty || y > x) && add(S, cf->priority[p], x, y, cf->type[p]) == DECLINE) return DECLINE;
        from = b;
    }
    return 0;
}

static int numeric_fits(const conf_t *cf, int k, const uint8_t *run, int32_t len, int32_t digits) {
    const int32_t *f = cf->plan[k];
    if (digits < f[0]) return 0;
    if (f[1]) {
        int found = 0;
        for (int32_t i = 0; i < len && !found; i++) found = run[i] == f[1] || (f[2] && run[i] == f[2]);
        if (!found) return 0;
    }
    if (f[3]) {
        int32_t dots = 0;
        for (int32_t i = 0; i < len; i++) dots += run[i] == '.';
        if (dots < f[3]) return 0;
    }
    return 1;
}

/* pii.find_pii(s, kinds) into S->found (then resolved); DECLINE when Python must judge. */
static int find_pii(scan_t *S, const uint8_t *s, int32_t n, int32_t kinds) {
    const conf_t *cf = S->cf;
    int32_t caps[SLOTS], a, b;
    S->n = 0;
    if (kinds & cf->numeric_types) {
        int32_t from = 0;
        while (from <= n) {
            b = search(S->vm, cf->entry[P_RUN], cf->first[P_RUN], s, n, from, caps, &a);
            if (b == OVERFLOW) return DECLINE;
            if (b < 0) break;
            int32_t digits = 0;
            for (int32_t i = a; i < b; i++)
                if (!strchr(" ().-+Xx", s[i])) digits++;
            int32_t window = b + 2 < n ? b + 2 : n;
            for (int k = 0; k < 7; k++)
                if (numeric_fits(cf, k, s + a, b - a, digits) && scan_all(S, P_NUMERIC + k, s, n, a, window, 0))
                    return DECLINE;
            from = b > a ? b : a + 1;
        }
    }
    if ((kinds >> cf->email & 1) && memchr(s, '@', (size_t)n)) {
        int32_t from = 0;
        while (from <= n) {
            b = search(S->vm, cf->entry[P_EMAIL], cf->first[P_EMAIL], s, n, from, caps, &a);
            if (b == OVERFLOW || b == a) return DECLINE;
            if (b < 0) break;
            int32_t left[SLOTS];
            for (int i = 0; i < SLOTS; i++) left[i] = -1;
            int32_t r = a ? run(S->vm, 0, cf->entry[P_EMAIL_LEFT], s, n, a - 1, left) : -1;
            if (r == OVERFLOW) return DECLINE;
            if (r < 0 && add(S, cf->priority[P_EMAIL], a, b, cf->email) == DECLINE) return DECLINE;
            from = b;
        }
    }
    if (kinds >> cf->ipv6 & 1) {
        int32_t colons = 0;
        for (int32_t i = 0; i < n; i++) colons += s[i] == ':';
        if (colons >= 2 && scan_all(S, P_IPV6, s, n, 0, n, 1)) return DECLINE;
    }
    if (kinds >> cf->iban & 1) {
        int32_t from = 0;
        while (from <= n) {
            b = search(S->vm, cf->entry[P_IBAN], cf->first[P_IBAN], s, n, from, caps, &a);
            if (b == OVERFLOW || b == a) return DECLINE;
            if (b < 0) break;
            int32_t stop;
            if (!(a && is_alnum(s[a - 1])) && iban(cf, s, n, a, &stop) &&
                add(S, cf->priority[P_IBAN], a, stop, cf->iban) == DECLINE)
                return DECLINE;
            from = b;
        }
    }
    if (kinds >> SECRET_BIT & 1) {
        b = search(S->vm, cf->entry[P_ANCHOR], cf->first[P_ANCHOR], s, n, 0, caps, &a);
        if (b == OVERFLOW) return DECLINE;
        if (b >= 0)
            for (int k = 0; k < N_SECRETS; k++) {
                int open = cf->gates[k][0][1] == 0;
                for (int g = 0; g < 5 && !open && cf->gates[k][g][1]; g++)
                    open = has(s, n, S->needles + cf->gates[k][g][0], cf->gates[k][g][1]);
                if (open && scan_all(S, P_SECRETS + k, s, n, 0, n, 1)) return DECLINE;
            }
    }
    /* resolve_overlaps: by priority (higher first), then longer; stable; then by start. */
    found_t *f = S->found;
    int32_t m = S->n;
    for (int32_t i = 1; i < m; i++) {
        found_t v = f[i];
        int32_t j = i;
        while (j > 0 && (f[j - 1].priority < v.priority ||
                         (f[j - 1].priority == v.priority && f[j - 1].end - f[j - 1].start < v.end - v.start))) {
            f[j] = f[j - 1];
            j--;
        }
        f[j] = v;
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < m; i++) {
        int clear = 1;
        for (int32_t j = 0; j < kept && clear; j++) clear = f[i].end <= f[j].start || f[i].start >= f[j].end;
        if (clear) f[kept++] = f[i];
    }
    for (int32_t i = 1; i < kept; i++) {
        found_t v = f[i];
        int32_t j = i;
        while (j > 0 && f[j - 1].start > v.start) {
            f[j] = f[j - 1];
            j--;
        }
        f[j] = v;
    }
    S->n = kept;
    return 0;
}

/* Python's len(text.split()) of ASCII text. */
static int64_t words(const uint8_t *s, int64_t n) {
    int64_t count = 0;
    int inside = 0;
    for (int64_t i = 0; i < n; i++) {
        int space = py_space(s[i]);
        if (!space && !inside) count++;
        inside = !space;
    }
    return count;
}

/* `pattern.search(s, from, end)` of the program at `entry`, for tests: the match's end or
 * -1 (OVERFLOW), its start in caps[0] and groups 1..3 in caps[2..7]. */
int32_t regex_search(const int32_t *code, const uint8_t *sets, int32_t entry, int32_t first, const uint8_t *s,
                     int32_t end, int32_t from, int32_t *caps, void *stack, int64_t stack_bytes) {
    vm_t vm = {code, sets, (entry_t *)stack, (int32_t)(stack_bytes / (int64_t)sizeof(entry_t))};
    int32_t start = -1, e = search(&vm, entry, first, s, end, from, caps, &start);
    caps[0] = start;
    caps[1] = e;
    return e;
}

/* find_pii over one string for tests: findings as (start, end, type) triples; their count
 * or DECLINE. */
int64_t pii_find(const uint8_t *s, int64_t n, int32_t kinds, const int32_t *code, const uint8_t *sets,
                 const int32_t *conf, const uint8_t *needles, const jwt_t *jwt, int32_t *out, void *stack,
                 int64_t stack_bytes) {
    vm_t vm = {code, sets, (entry_t *)stack, (int32_t)(stack_bytes / (int64_t)sizeof(entry_t))};
    found_t found[MAX_FOUND];
    scan_t S = {&vm, (const conf_t *)conf, needles, found, 0, jwt};
    if (find_pii(&S, s, (int32_t)n, kinds)) return DECLINE;
    for (int32_t i = 0; i < S.n; i++) {
        out[3 * i] = found[i].start;
        out[3 * i + 1] = found[i].end;
        out[3 * i + 2] = found[i].type;
    }
    return S.n;
}

/* Lines of `buf` (joined by \n), each a plain row (plain_rows' status >= 0) with its
 * candidate families in kinds[i]. For line i, status[i] is 1 when judged here: its clean
 * row at out[offsets[i]:offsets[i + 1]], the characters the statistics count in
 * chars_out[i], its PII density in density[i], its finding and
 * redaction counts added to found/redacted (per type id; found[N_TYPES]: rows with PII).
 * 0: Python's. `redact`: type bits to redact; `quarantine`: secrets quarantine the row. */
int64_t pii_rows(const uint8_t *buf, int64_t len, const int64_t *spec, const uint8_t *names, const int32_t *kinds,
                 const int32_t *code, const uint8_t *sets, const int32_t *conf, const uint8_t *needles,
                 const jwt_t *jwt, int32_t redact, int32_t quarantine, double max_density, int32_t *status,
                 int64_t *chars_out, double *density, int64_t *found, int64_t *redacted, uint8_t *out, int64_t out_len,
                 int64_t *offsets, uint8_t *scratch, void *stack, int64_t stack_bytes) {
    const conf_t *cf = (const conf_t *)conf;
    vm_t vm = {code, sets, (entry_t *)stack, (int32_t)(stack_bytes / (int64_t)sizeof(entry_t))};
    found_t all[MAX_PAIRS][MAX_FOUND / 8];
    int32_t counts[MAX_PAIRS];
    int64_t i = 0, start = 0;
    uint8_t *o = out;
    offsets[0] = 0;
    for (;;) {
        const uint8_t *nl = memchr(buf + start, '\n', (size_t)(len - start));
        int64_t stop = nl ? nl - buf : len;
        pair_t pairs[MAX_PAIRS];
        int n = 0, ok = 1;
        int64_t chars;
        uint64_t key;
        status[i] = 0;
        chars_out[i] = 0;
        density[i] = 0.0;
        int ascii;
        if (parse_plain(buf + start, buf + stop, spec, names, scratch, pairs, &n, &chars, &key, &ascii) < 0 || !ascii)
            ok = 0; /* the patterns here follow ASCII text alone */
        int64_t total = 0, word_total = 0;
        int secret = 0;
        for (int k = 0; k < n && ok; k++) {
            found_t f[MAX_FOUND];
            scan_t S = {&vm, cf, needles, f, 0, jwt};
            if (pairs[k].val_len > (1 << 30) || find_pii(&S, pairs[k].val, (int32_t)pairs[k].val_len, kinds[i]) ||
                S.n > MAX_FOUND / 8) {
                ok = 0;
                break;
            }
            memcpy(all[k], f, sizeof(found_t) * (size_t)S.n);
            counts[k] = S.n;
            total += S.n;
            for (int32_t j = 0; j < S.n; j++) secret |= (cf->secret_types >> f[j].type) & 1;
        }
        if (ok && total) {
            for (int k = 0; k < n; k++) word_total += words(pairs[k].val, pairs[k].val_len);
            density[i] = (double)total / (double)(word_total > 1 ? word_total : 1);
            if ((secret && quarantine) || density[i] > max_density) ok = 0; /* rejected: Python words it */
        }
        /* The clean row, each value redacted: at most 2 bytes a character or token byte. */
        int64_t need = 16;
        for (int k = 0; k < n && ok; k++) {
            need += 2 * (pairs[k].key_len + pairs[k].val_len) + 8;
            for (int32_t j = 0; j < counts[k]; j++) need += 2 * (int64_t)cf->tokens[all[k][j].type][1];
        }
        if (ok && (o - out) + 2 * need > out_len) ok = 0;
        if (ok) {
            uint8_t *vals[MAX_PAIRS];
            int64_t lens[MAX_PAIRS];
            uint8_t *w = o + need; /* the redacted values, past where the row can reach */
            for (int k = 0; k < n; k++) {
                const uint8_t *v = pairs[k].val;
                int64_t pos = 0;
                vals[k] = w;
                for (int32_t j = 0; j < counts[k]; j++) {
                    found_t *f = &all[k][j];
                    found[f->type]++;
                    if (!(redact >> f->type & 1)) continue;
                    redacted[f->type]++;
                    memcpy(w, v + pos, (size_t)(f->start - pos));
                    w += f->start - pos;
                    const int32_t *token = cf->tokens[f->type];
                    memcpy(w, needles + token[0], (size_t)token[1]);
                    w += token[1];
                    pos = f->end;
                }
                memcpy(w, v + pos, (size_t)(pairs[k].val_len - pos));
                w += pairs[k].val_len - pos;
                lens[k] = w - vals[k];
            }
            o = write_row(o, pairs, n, (const uint8_t *const *)vals, lens);
            found[N_TYPES] += total > 0;
            status[i] = 1;
            chars_out[i] = chars;
        }
        offsets[++i] = o - out;
        if (!nl) break;
        start = stop + 1;
    }
    return i;
}
