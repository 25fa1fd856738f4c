"""PII and secret detection with checksum validation, and typed redaction.

Fast because each recognizer is one compiled regex behind a cheap substring gate, and
precise because every candidate that carries a checksum is validated before it counts:
payment cards by Luhn and issuer prefix, IBANs by mod-97 and country length, Chinese
resident IDs by the GB 11643 check digit and a real birth date, JWTs by decoding their
header. Bare numbers right after words like "order", "invoice" or "ISBN" are hard
negatives and are left alone.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

EMAIL, PHONE, IPV4, IPV6 = "EMAIL", "PHONE", "IPV4", "IPV6"
CREDIT_CARD, IBAN, US_SSN, CN_RESIDENT_ID = "CREDIT_CARD", "IBAN", "US_SSN", "CN_RESIDENT_ID"
CLOUD_KEY, PRIVATE_KEY, JWT, BEARER_TOKEN = "CLOUD_KEY", "PRIVATE_KEY", "JWT", "BEARER_TOKEN"
PERSON, ADDRESS = "PERSON", "ADDRESS"  # found by names.py (pii.names in the config)

SECRET_TYPES = frozenset({CLOUD_KEY, PRIVATE_KEY, JWT, BEARER_TOKEN})
SECRET = "SECRET"  # the secret recognizers' shared family (one anchor scan gates them all)
NAME_TYPES = frozenset({PERSON, ADDRESS})
ALL_TYPES = (
    PERSON,
    ADDRESS,
    EMAIL,
    PHONE,
    IPV4,
    IPV6,
    CREDIT_CARD,
    IBAN,
    US_SSN,
    CN_RESIDENT_ID,
    CLOUD_KEY,
    PRIVATE_KEY,
    JWT,
    BEARER_TOKEN,
)


@dataclass(frozen=True)
class PolicySpec:
    redact: frozenset[str]
    quarantine_secrets: bool
    max_density: float


# The docs' policy table (docs/data-validation.md) is generated from this dict; keep them one.
POLICIES: dict[str, PolicySpec] = {
    "strict": PolicySpec(frozenset(ALL_TYPES), quarantine_secrets=True, max_density=0.10),
    "balanced": PolicySpec(frozenset(ALL_TYPES), quarantine_secrets=False, max_density=0.20),
    "permissive": PolicySpec(
        frozenset({CREDIT_CARD, IBAN, US_SSN, CN_RESIDENT_ID} | SECRET_TYPES),  # names kept
        quarantine_secrets=False,
        max_density=0.40,
    ),
}


@dataclass(frozen=True)
class Finding:
    start: int
    end: int
    type: str

    def __len__(self) -> int:
        return self.end - self.start


# --- validators -----------------------------------------------------------------------


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i & 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_issuer_ok(d: str) -> bool:
    n, p2, p4 = len(d), int(d[:2]), int(d[:4])
    if d[0] == "4":
        return n in (13, 16, 19)  # Visa
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16  # Mastercard
    if p2 in (34, 37):
        return n == 15  # American Express
    if p4 == 6011 or p2 == 65 or 644 <= int(d[:3]) <= 649:
        return 16 <= n <= 19  # Discover
    if 3528 <= p4 <= 3589:
        return 16 <= n <= 19  # JCB
    if p2 in (36, 38, 39) or 300 <= int(d[:3]) <= 305:
        return 14 <= n <= 19  # Diners Club
    if p2 == 62:
        return 16 <= n <= 19  # UnionPay
    if p2 in (50, 56, 57, 58) or p2 in (63, 67):
        return 12 <= n <= 19  # Maestro
    return False


IBAN_LENGTHS = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NL": 18,
    "NO": 15,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "SA": 24,
    "SC": 31,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
}


def iban_valid(iban: str) -> bool:
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban.isalnum():
        return False
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


_GB11643_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def cn_resident_id_valid(value: str) -> bool:
    value = value.upper()
    if len(value) != 18 or not value[:17].isdigit():
        return False
    total = sum(int(ch) * w for ch, w in zip(value[:17], _GB11643_WEIGHTS, strict=False))
    if "10X98765432"[total % 11] != value[17]:
        return False
    try:
        datetime.date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return True


def _jwt_header_ok(token: str) -> bool:
    head = token.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


# --- recognizers ----------------------------------------------------------------------


def _rx(pattern: str, flags: int = 0) -> re.Pattern:
    """ASCII classes: [0-9] is faster than Unicode \\d, and CJK text next to a number is a
    boundary (Chinese has no spaces between words and numbers)."""
    return re.compile(pattern, flags | re.ASCII)


_NEGATIVE_PREFIX = _rx(
    r"(?i)\b(?:order|invoice|ticket|tracking|ref|reference|isbn(?:-1[03])?|version|ver|"
    r"release|build|serial|sku|part|case|batch|lot)\b\W{0,3}(?:(?:no|num|number|id|#)\W{0,3})?$"
)


def _negative_context(text: str, start: int) -> bool:
    return _NEGATIVE_PREFIX.search(text, max(0, start - 40), start) is not None


Validator = Callable[[str, "re.Match[str]"], "tuple[int, int] | None"]


def _whole(text: str, m: re.Match) -> tuple[int, int] | None:
    return m.span()


def _group1(text: str, m: re.Match) -> tuple[int, int] | None:
    return m.span(1)


def _phone(text: str, m: re.Match) -> tuple[int, int] | None:
    digits = len(m.group().translate(_SEPARATORS))
    if not 8 <= digits <= 15 or _negative_context(text, m.start()):
        return None
    return m.span()


def _card(text: str, m: re.Match) -> tuple[int, int] | None:
    digits = m.group().replace(" ", "").replace("-", "")
    if not 12 <= len(digits) <= 19 or not _card_issuer_ok(digits) or not luhn_valid(digits):
        return None
    return None if _negative_context(text, m.start()) else m.span()


def _ipv4(text: str, m: re.Match) -> tuple[int, int] | None:
    return None if _negative_context(text, m.start()) else m.span()


def _ipv6(text: str, m: re.Match) -> tuple[int, int] | None:
    candidate = m.group()
    if sum(1 for g in candidate.split(":") if g) < 3:
        return None
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return None
    return m.span()


def _iban(text: str, m: re.Match) -> tuple[int, int] | None:
    """Consume exactly the country's IBAN length, allowing single spaces between groups."""
    want = IBAN_LENGTHS.get(m.group(1))
    if want is None:
        return None
    chars, i, n = [], m.start(), len(text)
    while i < n and len(chars) < want:
        ch = text[i]
        if ch.isascii() and ch.isalnum():
            chars.append(ch)
        elif ch != " " or i + 1 >= n or text[i + 1] == " ":
            break
        i += 1
    if len(chars) != want or (i < n and text[i].isascii() and text[i].isalnum()):
        return None
    return (m.start(), i) if iban_valid("".join(chars).upper()) else None


def _cn_id(text: str, m: re.Match) -> tuple[int, int] | None:
    return m.span() if cn_resident_id_valid(m.group()) else None


def _ssn(text: str, m: re.Match) -> tuple[int, int] | None:
    return None if _negative_context(text, m.start()) else m.span()


def _jwt(text: str, m: re.Match) -> tuple[int, int] | None:
    if m.start() and (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_-"):
        return None
    return m.span() if _jwt_header_ok(m.group()) else None


def _bearer(text: str, m: re.Match) -> tuple[int, int] | None:
    """A token looks random: a digit, or mixed case over 20+ characters (not a word)."""
    token = m.group(1)
    random_looking = any(ch.isdigit() for ch in token) or (
        len(token) >= 20 and not token.islower() and not token.isupper()
    )
    return m.span(1) if random_looking else None


@dataclass(frozen=True)
class Recognizer:
    type: str
    pattern: re.Pattern
    validate: Validator
    priority: int
    gate: tuple[str, ...] = ()  # the text holds one of these, or the recognizer cannot match


# Numbers (cards, IDs, SSNs, phones, IPv4) only ever match inside a run of digits and
# separators, so one cheap scan finds those runs and their recognizers look nowhere else.
# The runs keep their context: lookbehinds see the text before a run.
_NUMERIC_RUN = _rx(r"[0-9+(][0-9 ().\-]{5,}[0-9Xx)]")
_SEPARATORS = str.maketrans("", "", " ().-+Xx")
NUMERIC: tuple[Recognizer, ...] = (
    Recognizer(CREDIT_CARD, _rx(r"(?<![\w-])(?:\d[ -]?){11,18}\d(?![\w-])"), _card, 70),
    Recognizer(
        CN_RESIDENT_ID,
        _rx(
            r"(?<![\w])[1-8]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]"
            r"(?![\w])"
        ),
        _cn_id,
        60,
    ),
    Recognizer(US_SSN, _rx(r"(?<![\w-])(?!000|666|9\d\d)\d{3}([- ])(?!00)\d{2}\1(?!0000)\d{4}(?![\w-])"), _ssn, 55),
    Recognizer(PHONE, _rx(r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,6}(?![\w]|[.-]\d)"), _phone, 40),
    Recognizer(
        PHONE,
        _rx(
            r"(?<![\w+.-])(?:1[ .-]?)?(?:\([2-9]\d{2}\) ?|[2-9]\d{2}[ .-])[2-9]\d{2}[ .-]\d{4}"
            r"(?![\w]|[.-]\d)"
        ),
        _phone,
        40,
    ),
    Recognizer(PHONE, _rx(r"(?<![\w+.-])(?:1[3-9]\d[ -]?\d{4}[ -]?\d{4}|0\d{2,3}-\d{7,8})(?![\w]|[.-]\d)"), _phone, 40),
    Recognizer(
        IPV4,
        _rx(
            r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
            r"(?![\w]|\.\d)"
        ),
        _ipv4,
        35,
    ),
)


@dataclass(frozen=True)
class Fit:
    """What a numeric run needs for a recognizer to possibly match in it: digits, one of
    some characters (when any are named), dots."""

    digits: int = 0
    one_of: str = ""
    dots: int = 0

    def test(self) -> Callable[[str, int], bool]:
        """This fit as a test of a run and its digit count: a closure, as it runs for
        every numeric run (attribute lookups would treble its cost)."""
        least, dots, chars = self.digits, self.dots, tuple(self.one_of)
        if not dots and not chars:
            return lambda run, d: d >= least
        if not dots and len(chars) <= 2:
            a, b = chars[0], chars[-1]
            return lambda run, d: d >= least and (a in run or b in run)
        return lambda run, d: (
            d >= least and (not chars or any(c in run for c in chars)) and (not dots or run.count(".") >= dots)
        )


# Which numeric recognizers a run can possibly satisfy, from its digit count and shape.
NUMERIC_FITS = (
    Fit(digits=12),  # card
    Fit(digits=17),  # CN resident ID
    Fit(digits=9, one_of="- "),  # SSN
    Fit(one_of="+"),  # international phone
    Fit(digits=10),  # US phone
    Fit(digits=10),  # CN phone
    Fit(dots=3),  # IPv4
)
_NUMERIC_PLAN = tuple(zip(NUMERIC, (fit.test() for fit in NUMERIC_FITS), strict=True))

# Secrets share one anchor scan: most text holds none of these strings.
SECRET_ANCHOR = (
    r"PRIVATE KEY|eyJ|earer|EARER|A(?:KIA|SIA|BIA|CCA|GPA|IDA|ROA|IPA|NPA|NVA|PKA|Iza)|gh[pousr]_"
    r"|github_pat_|xox|ecret|ECRET|ccount[Kk]ey|CCOUNTKEY"
)
_SECRET_ANCHOR = _rx(SECRET_ANCHOR)
SECRETS: tuple[Recognizer, ...] = (
    Recognizer(
        PRIVATE_KEY,
        _rx(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)",
            re.S,
        ),
        _whole,
        100,
        ("PRIVATE KEY",),
    ),
    Recognizer(JWT, _rx(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?![\w-])"), _jwt, 90, ("eyJ",)),
    Recognizer(BEARER_TOKEN, _rx(r"(?i:\bbearer)\s+([A-Za-z0-9._~+/-]{16,}=*)(?![\w.~+/-])"), _bearer, 85),
    Recognizer(
        CLOUD_KEY,
        _rx(
            r"(?<![A-Za-z0-9])(?:(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}"
            r"|AIza[0-9A-Za-z_-]{35}|gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{60,255}"
            r"|xox[abposr]-[A-Za-z0-9-]{10,})(?![A-Za-z0-9])"
        ),
        _whole,
        80,
    ),
    Recognizer(
        CLOUD_KEY,
        _rx(
            r"(?i:aws_secret_access_key|secret_access_key|aws_secret_key|accountkey)[\"']?\s*[:=]\s*"
            r"[\"']?([A-Za-z0-9/+]{40}(?:[A-Za-z0-9/+]{46}==)?)(?![A-Za-z0-9/+])"
        ),
        _group1,
        80,
        ("ecret", "ECRET", "ccountKey", "ccountkey", "CCOUNTKEY"),
    ),
)

_EMAIL = Recognizer(
    EMAIL,
    _rx(
        r"[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
    ),
    _whole,
    50,
)
_IPV6 = Recognizer(IPV6, _rx(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])"), _ipv6, 45)
# Starts with a character class (not a lookbehind) so the regex engine can skip ahead fast.
_IBAN = Recognizer(IBAN, _rx(r"([A-Z]{2})\d{2}(?= ?[A-Z0-9])"), _iban, 65)
_EMAIL_LEFT = _rx(r"[\w.+%-]")


def _scan(rec: Recognizer, text: str, out: list, pos: int = 0, endpos: int | None = None) -> None:
    matches = rec.pattern.finditer(text, pos) if endpos is None else rec.pattern.finditer(text, pos, endpos)
    for m in matches:
        span = rec.validate(text, m)
        if span is not None and span[1] > span[0]:
            out.append((rec.priority, span[0], span[1], rec.type))


NUMERIC_TYPES = frozenset(rec.type for rec in NUMERIC)


def find_pii(text: str, kinds: frozenset[str] | None = None) -> list[Finding]:
    """All non-overlapping findings in `text`, in order; higher priority wins overlaps.

    `kinds` (from `candidates`) names the recognizer families whose Hyperscan candidates
    matched the line `text` came from; a family none of whose candidates matched can
    find nothing, so its scan is skipped. None scans them all."""
    candidates: list[tuple[int, int, int, str]] = []
    n = len(text)
    for run in _NUMERIC_RUN.finditer(text) if kinds is None or not kinds.isdisjoint(NUMERIC_TYPES) else ():
        start, end = run.span()
        chunk = run.group()
        digits = len(chunk.translate(_SEPARATORS))
        window_end = min(n, end + 2)  # lookaheads need two characters of context
        for rec, fits in _NUMERIC_PLAN:
            if fits(chunk, digits):
                for m in rec.pattern.finditer(text, start, window_end):
                    span = rec.validate(text, m)
                    if span is not None:
                        candidates.append((rec.priority, span[0], span[1], rec.type))
    if (kinds is None or EMAIL in kinds) and "@" in text:
        for m in _EMAIL.pattern.finditer(text):
            # A match that starts mid-token is the tail of a longer, non-email token.
            if m.start() == 0 or not _EMAIL_LEFT.match(text, m.start() - 1):
                candidates.append((_EMAIL.priority, m.start(), m.end(), EMAIL))
    if (kinds is None or IPV6 in kinds) and text.count(":") >= 2:
        _scan(_IPV6, text, candidates)
    for m in _IBAN.pattern.finditer(text) if kinds is None or IBAN in kinds else ():
        left = text[m.start() - 1] if m.start() else " "
        if not (left.isascii() and left.isalnum()):
            span = _iban(text, m)
            if span is not None:
                candidates.append((_IBAN.priority, span[0], span[1], IBAN))
    if (kinds is None or SECRET in kinds) and _SECRET_ANCHOR.search(text):
        for rec in SECRETS:
            if not rec.gate or any(n in text for n in rec.gate):
                _scan(rec, text, candidates)
    return resolve_overlaps(candidates)


def resolve_overlaps(candidates: list[tuple[int, int, int, str]]) -> list[Finding]:
    """(priority, start, end, type) candidates -> non-overlapping findings in text order:
    higher priority wins an overlap, then the longer span."""
    if not candidates:
        return []
    if len(candidates) == 1:
        _, s, e, t = candidates[0]
        return [Finding(s, e, t)]
    candidates.sort(key=lambda c: (-c[0], c[1] - c[2]))
    kept: list[Finding] = []
    for _, s, e, t in candidates:
        if all(e <= k.start or s >= k.end for k in kept):
            kept.append(Finding(s, e, t))
    kept.sort(key=lambda f: f.start)
    return kept


def is_han(ch: str) -> bool:
    """A CJK unified ideograph (the basic block, which holds everyday Chinese)."""
    return "\u4e00" <= ch <= "\u9fff"


_HAN_CHAR = re.compile("[\u4e00-\u9fff]")  # `is_han`'s range, for counting in one call


def word_count(text: str) -> int:
    """Whitespace-separated words, plus one per two Han characters: Chinese has no spaces
    and its words average under two characters, so a sentence is not one "word"."""
    words = len(text.split())
    if not text.isascii():
        words += len(_HAN_CHAR.findall(text)) // 2
    return words


TOKENS = {kind: f"[{kind}]" for kind in ALL_TYPES}  # what redaction puts in a finding's place


def redact(text: str, findings: Iterable[Finding], types: frozenset[str]) -> str:
    """Replace each finding of a redacted type by its typed token, e.g. `[EMAIL]`."""
    out, pos = [], 0
    for f in findings:
        if f.type in types:
            out.append(text[pos : f.start])
            out.append(TOKENS[f.type])
            pos = f.end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def policy_table() -> str:
    """The docs' policy table, rendered from POLICIES (a test keeps them equal)."""
    names = ("strict", "balanced", "permissive")
    rows = ["| PII type | strict | balanced | permissive |", "|---|---|---|---|"]
    for kind in ALL_TYPES:
        cells = []
        for name in names:
            spec = POLICIES[name]
            if kind in SECRET_TYPES and spec.quarantine_secrets:
                cells.append("quarantine row")
            else:
                cells.append(f"`[{kind}]`" if kind in spec.redact else "kept")
        rows.append(f"| {kind} | " + " | ".join(cells) + " |")
    rows.append(
        "| max PII density (findings per word) | " + " | ".join(f"{POLICIES[n].max_density:.2f}" for n in names) + " |"
    )
    return "\n".join(rows)
