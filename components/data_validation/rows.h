/* What plain_rows.c shares with pii_rows.c: a plain line's parse and orjson's writing. */
#ifndef ROWS_H
#define ROWS_H

#include <stdint.h>

#define MAX_PAIRS 16

typedef struct {
    const uint8_t *key, *val; /* unescaped, in scratch */
    int64_t key_len, val_len;
} pair_t;

int py_space(uint8_t c);
uint8_t *write_string(uint8_t *o, const uint8_t *s, int64_t n);
int parse_plain(const uint8_t *p, const uint8_t *end, const int64_t *spec, const uint8_t *names, uint8_t *scratch,
                pair_t *pairs, int *count, int64_t *chars, uint64_t *key);
uint8_t *write_row(uint8_t *o, const pair_t *pairs, int n, const uint8_t *const *vals, const int64_t *lens);

#endif
