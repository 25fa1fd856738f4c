"""pii_rows.c against the Python it stands in for: its matcher finds what `re` finds for
every construct pii.py's patterns use, and its `find_pii` gives `pii.find_pii`'s findings
(or declines) on labeled PII, hard negatives and their mutations. Whole rows are held
equal to the Python path in test_block_validation.py."""

import random
import re

import pytest

from kfp_llmops.components.data_validation import pii, pii_rows
from kfp_llmops.components.data_validation.regex_program import Program, Unsupported
from tests import pii_corpus

_ALPHABET = "0123456789 -.()+:@aAeEfFxXyYJ_/=\nbearer KEY-----"


def _mutations(texts: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chars = list(rng.choice(texts))
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(chars) + 1)
            op = rng.randrange(3)
            if op == 0 and chars:
                chars[min(i, len(chars) - 1)] = rng.choice(_ALPHABET)
            elif op == 1:
                chars.insert(i, rng.choice(_ALPHABET))
            elif chars:
                del chars[min(i, len(chars) - 1)]
        out.append("".join(chars))
    return out


_CONSTRUCTS = [  # (pattern, a text it matches, which the test cuts and splices)
    (r"(?:\d[ -]?){3,5}\d(?![\w-])", "1 2-3456 7"),  # greedy counted repeat, backtracking into it
    (r"a.*?b", "xa-ab"),  # lazy
    (r"-----BEGIN (?:[A-Z0-9]+ )*KEY-----(?:(?s:.*?)-----END|.*\Z)", "-----BEGIN RSA KEY-----a\nb-----END"),
    (r"(?<![\w.])\d+(?:\.\d+)+", "1.2.3"),  # negative lookbehind, before `pos` too
    (r"(?<=x)\d\d", "x12"),  # positive lookbehind
    (r"(\d{3})([- ])\d\2\d", "123-4-5"),  # backreference
    (r"(?i)\bre(?:f|ference)\b\W{0,3}$", "Reference: "),  # case-insensitive, \b, $ at endpos
    (r"(?i:\bbearer)\s+([A-Za-z0-9._~+/-]{4,}=*)", "BEARER abc.def=="),
    (r"[^a-c\d]+", "xyz"),  # negated class
    (r"ab|a|abc", "abc"),  # leftmost alternative wins
    (r"(?=\d{3})\d", "1234"),  # lookahead
    (r"(?P<x>a)\x41{1,}?[\]\-.]", "aAA]"),  # a named group, a hex escape, a lazy count, escapes in a class
    (r"a{,2}b{2}c{1,}|{x}|a{}", "aabbc{x}"),  # counts, and braces that are not one
    (r"[^\W\d_]+\t?", "abc\t"),  # class escapes inside a negated class
    (r"(?i)[a-c]+(?-i:X)", "AbCX"),  # a flag turned off for a group
]


_PIECES = ["123", "-", " ", "45", "6789", "x", "1.2", ".3", "ref", "REF", "erence", ":", "-----BEGIN ", "RSA "]
_PIECES += ["KEY-----", "-----END", "bearer ", "Bearer\t", "abcdef==", "ab", "abc", "a", "b", "c", "\n", "#", "_", "0"]
_PIECES += ["A", "x", "X", "]", "{x}", "{", "\t", "B"]


@pytest.mark.parametrize(("source", "example"), _CONSTRUCTS)
def test_the_matcher_finds_what_re_finds(source, example):
    pattern = re.compile(source, re.ASCII)
    rng = random.Random(source)
    pieces = _PIECES + [example[: len(example) // 2], example[len(example) // 2 :]]
    texts = []
    for _ in range(600):
        around = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6))) for _ in range(2)]
        texts.append(around[0] + (example if rng.random() < 0.5 else "") + around[1])
    matched = 0
    for text in texts:
        for pos, endpos in ((0, None), (3, len(text) - 2)):
            m = pattern.search(text, pos) if endpos is None else pattern.search(text, pos, max(endpos, 0))
            got = pii_rows.regex_search(pattern, text, pos, None if endpos is None else max(endpos, 0))
            want = None
            if m is not None:
                want = (m.span(), tuple(m.span(g) if g <= pattern.groups else (-1, -1) for g in (1, 2, 3)))
            assert got == want, (text, pos, endpos)
            matched += m is not None
    assert matched > 10


def test_what_the_matcher_does_not_follow_is_refused_when_built():
    program = Program()
    with pytest.raises(Unsupported):
        program.add(re.compile(r"(?:a|)+b", re.ASCII))  # a repeated body that can match nothing
    with pytest.raises(Unsupported):
        program.add(re.compile(r"\w+"))  # Unicode classes
    with pytest.raises(Unsupported):
        program.add(re.compile(r"(a)(b)(c)(d)", re.ASCII))  # a fourth group
    with pytest.raises(Unsupported):
        program.add(re.compile(r"(?m)a$", re.ASCII))  # `$` before every newline


def test_find_pii_in_c_is_find_pii(monkeypatch):
    """Every text, JWTs included (their headers decoded by pii.py before the call)."""
    real = pii_rows.jwt_verdicts
    samples = pii_corpus.labeled_samples(3000, seed=21) + pii_corpus.name_samples(600, seed=21)
    texts = [s.text for s in samples if s.text.isascii()]
    texts += _mutations(texts, 6000, seed=21)
    families = [None, frozenset({pii.CREDIT_CARD, pii.US_SSN}), frozenset({pii.EMAIL, pii.SECRET, pii.IPV6})]
    found = 0
    for text in texts:
        for kinds in families:
            got = pii_rows.find(text, kinds)
            assert got == pii.find_pii(text, kinds), (text, kinds)
            found += len(got)
    types = {f.type for t in texts[:3000] for f in pii_rows.find(t, None)}
    assert set(pii.ALL_TYPES) - pii.NAME_TYPES <= types
    assert found > 3000
    # A JWT whose head Python was not asked about is left to it, never guessed.
    monkeypatch.setattr(pii_rows, "jwt_verdicts", lambda data: real(b""))
    with_jwt = [t for t in texts if any(f.type == pii.JWT for f in pii.find_pii(t, None))]
    assert with_jwt and all(pii_rows.find(t, None) is None for t in with_jwt)
    assert all(pii_rows.find(t, None) is not None for t in texts[:500] if "eyJ" not in t)
