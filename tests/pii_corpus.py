"""A labeled PII corpus: valid positives of every type (checksums computed, not copied)
and the hard negatives that must survive. Shared by the tests and the benchmark."""
from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from dataclasses import dataclass, field

from kfp_llmops.components.data_validation import pii

_GB11643_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def luhn_complete(prefix_and_body: str) -> str:
    """Append the Luhn check digit."""
    for d in "0123456789":
        if pii.luhn_valid(prefix_and_body + d):
            return prefix_and_body + d
    raise AssertionError


def luhn_break(number: str) -> str:
    last = int(number[-1])
    return number[:-1] + str((last + 1 + random.Random(number).randint(0, 8)) % 10)


def card(rng: random.Random) -> str:
    prefix, length = rng.choice([("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("34", 15),
                                 ("37", 15), ("6011", 16), ("65", 16), ("3530", 16), ("62", 16)])
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    number = luhn_complete(body)
    style = rng.random()
    if style < 0.4 and length == 16:
        return " ".join(number[i:i + 4] for i in range(0, 16, 4))
    if style < 0.6 and length == 16:
        return "-".join(number[i:i + 4] for i in range(0, 16, 4))
    return number


def iban(rng: random.Random) -> str:
    country = rng.choice(["DE", "GB", "FR", "NL", "ES", "IT", "CH", "BE", "PL", "SE"])
    n = pii.IBAN_LENGTHS[country]
    if country == "GB":
        bban = rng.choice(["NWBK", "BARC", "HBUK"]) + "".join(rng.choice(string.digits) for _ in range(14))
    elif country == "NL":
        bban = rng.choice(["ABNA", "RABO", "INGB"]) + "".join(rng.choice(string.digits) for _ in range(10))
    else:
        bban = "".join(rng.choice(string.digits) for _ in range(n - 4))
    numeric = "".join(str(int(ch, 36)) for ch in bban + country + "00")
    check = 98 - int(numeric) % 97
    value = f"{country}{check:02d}{bban}"
    assert pii.iban_valid(value)
    if rng.random() < 0.5:
        return " ".join(value[i:i + 4] for i in range(0, len(value), 4))
    return value


def cn_id(rng: random.Random) -> str:
    area = str(rng.randint(110000, 659999))
    birth = f"{rng.randint(1950, 2005)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
    body = area + birth + f"{rng.randint(0, 999):03d}"
    total = sum(int(ch) * w for ch, w in zip(body, _GB11643_WEIGHTS))
    return body + "10X98765432"[total % 11]


def ssn(rng: random.Random) -> str:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def email(rng: random.Random) -> str:
    user = rng.choice(["john.doe", "a.smith", "li.wei", "maria_garcia", "ops+alerts", "k.tanaka"])
    return f"{user}{rng.randint(1, 999)}@{rng.choice(['example.com', 'mail.example.org', 'uni.example.edu', 'corp.co.uk'])}"


def phone(rng: random.Random) -> str:
    return rng.choice([
        f"+1 {rng.randint(201, 989)} {rng.randint(200, 999)} {rng.randint(1000, 9999)}",
        f"({rng.randint(201, 989)}) {rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
        f"{rng.randint(201, 989)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
        f"+44 20 {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
        f"+49 30 {rng.randint(100000, 999999)}",
        f"+33 1 {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)}",
        f"+86 {rng.choice(['138', '139', '186', '150'])} {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
        f"{rng.choice(['138', '139', '186', '150'])}{rng.randint(10000000, 99999999)}",
        f"010-{rng.randint(10000000, 99999999)}",
    ])


def ipv4(rng: random.Random) -> str:
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


def ipv6(rng: random.Random) -> str:
    groups = [f"{rng.randint(0, 0xffff):x}" for _ in range(8)]
    if rng.random() < 0.5:
        return "2001:db8:" + ":".join(groups[2:5]) + "::" + groups[7]
    return ":".join(groups)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(rng: random.Random) -> str:
    head = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64url(json.dumps({"sub": str(rng.randint(1, 10**9)), "name": "x"}).encode())
    sig = _b64url(rng.randbytes(32))
    return f"{head}.{body}.{sig}"


def cloud_key(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:
        return "AKIA" + "".join(rng.choice(string.ascii_uppercase + "234567") for _ in range(16))
    if kind < 0.75:
        return "AIza" + "".join(rng.choice(string.ascii_letters + string.digits + "_-") for _ in range(35))
    return "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))


def private_key(rng: random.Random) -> str:
    body = "\n".join(base64.b64encode(rng.randbytes(48)).decode() for _ in range(4))
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def bearer(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(32))


GENERATORS = {
    pii.EMAIL: (email, ["Contact {v} for details.", "Send it to {v} please."]),
    pii.PHONE: (phone, ["Call me at {v} tomorrow.", "My number is {v}."]),
    pii.IPV4: (ipv4, ["The server at {v} is down.", "Login from {v} was blocked."]),
    pii.IPV6: (ipv6, ["Reach the host on {v} now.", "Traffic came from {v} today."]),
    pii.CREDIT_CARD: (card, ["My card number is {v}.", "Charge {v} for the order."]),
    pii.IBAN: (iban, ["Wire the money to {v} today.", "Account: {v}"]),
    pii.US_SSN: (ssn, ["SSN {v} on file.", "Her social security number is {v}."]),
    pii.CN_RESIDENT_ID: (cn_id, ["身份证号 {v}", "ID card {v} was scanned."]),
    pii.CLOUD_KEY: (cloud_key, ["key = {v}", "Use {v} for the upload."]),
    pii.PRIVATE_KEY: (private_key, ["Here is the key:\n{v}\nkeep it safe."]),
    pii.JWT: (jwt, ["token={v}", "The session token {v} expired."]),
    pii.BEARER_TOKEN: (bearer, ["Authorization: Bearer {v}", "curl -H 'Authorization: Bearer {v}'"]),
}


def hard_negative(rng: random.Random) -> tuple[str, str]:
    """(template, value) that must come through untouched."""
    kind = rng.randrange(10)
    if kind == 0:   # Luhn-invalid 16 digits with a card-like prefix
        v = luhn_break(card(rng).replace(" ", "").replace("-", "")[:16].ljust(16, "0"))
        while pii.luhn_valid(v):
            v = luhn_break(v)
        return "Reference number {v} is invalid.", v
    if kind == 1:
        return "Order {v} has shipped.", rng.choice([
            f"ORD-{rng.randint(2019, 2026)}-{rng.randint(100000, 999999)}",
            f"#{rng.randint(10**9, 10**10 - 1)}", f"{rng.randint(10**10, 10**11 - 1)}"])
    if kind == 2:
        return "Logged at {v} by the job.", rng.choice([
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z",
            f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
            str(rng.randint(1_600_000_000, 1_800_000_000)),
            str(rng.randint(1_600_000_000_000, 1_800_000_000_000))])
    if kind == 3:
        return "Upgrade to version {v} now.", rng.choice([
            f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}",
            f"v{rng.randint(1, 12)}.{rng.randint(0, 9)}.{rng.randint(0, 99)}",
            f"{rng.randint(1, 5)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}"])
    if kind == 4:
        isbn = luhn_complete("978" + "".join(rng.choice(string.digits) for _ in range(8)) + "0")[:13]
        return "The book ISBN {v} is in stock.", rng.choice([isbn, f"978-{rng.randint(0, 9)}-"
                                                               f"{rng.randint(10, 99)}-{rng.randint(100000, 999999)}-{rng.randint(0, 9)}"])
    if kind == 5:
        data = rng.randbytes(16)
        return "Checksum {v} matches.", rng.choice([hashlib.sha256(data).hexdigest(),
                                                     hashlib.sha1(data).hexdigest(),
                                                     hashlib.md5(data).hexdigest()])
    if kind == 6:
        return "Request id {v} failed.", str(uuid.UUID(bytes=rng.randbytes(16)))
    if kind == 7:
        return "The meeting is at {v} today.", f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    if kind == 8:
        return "Invoice {v} is due.", f"INV-{rng.randint(10**7, 10**8 - 1)}"
    return "It costs {v} dollars.", f"{rng.randint(1, 99999)}.{rng.randint(0, 99):02d}"


@dataclass
class Sample:
    text: str
    positives: list[tuple[str, int, int]] = field(default_factory=list)   # (type, start, end)
    negatives: list[tuple[int, int]] = field(default_factory=list)        # (start, end)


_FILLER = ["The weather was mild and the team shipped the release.",
           "Please review the attached notes before the meeting.",
           "The model was trained on public domain books.",
           "We met at the cafe and talked about gardening."]


def labeled_samples(n: int, seed: int = 0) -> list[Sample]:
    """n samples: about half hold one PII value, half one hard negative, all with filler."""
    rng = random.Random(seed)
    types = list(GENERATORS)
    out = []
    for i in range(n):
        filler = rng.choice(_FILLER)
        if i % 2 == 0:
            kind = types[(i // 2) % len(types)]
            gen, templates = GENERATORS[kind]
            template, value = rng.choice(templates), gen(rng)
        else:
            kind = None
            template, value = hard_negative(rng)
        prefix = filler + " "
        head, tail = template.split("{v}")
        text = prefix + head + value + tail
        start = len(prefix) + len(head)
        sample = Sample(text)
        if kind:
            sample.positives.append((kind, start, start + len(value)))
        else:
            sample.negatives.append((start, start + len(value)))
        out.append(sample)
    return out
