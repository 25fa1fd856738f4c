"""Every PII type with positives and hard negatives, and the validators behind them."""

import pytest

from kfp_llmops.components.data_validation import pii
from pii_corpus import labeled_samples


def types_in(text):
    return [(f.type, text[f.start : f.end]) for f in pii.find_pii(text)]


POSITIVES = [
    ("Mail jane.doe@example.com today", pii.EMAIL, "jane.doe@example.com"),
    ("ops+alerts@mail.example.co.uk wrote", pii.EMAIL, "ops+alerts@mail.example.co.uk"),
    ("Call +1 415 555 0132 now", pii.PHONE, "+1 415 555 0132"),
    ("Call (415) 555-0132 now", pii.PHONE, "(415) 555-0132"),
    ("Call 415-555-0132 now", pii.PHONE, "415-555-0132"),
    ("Ring +44 20 7946 0958", pii.PHONE, "+44 20 7946 0958"),
    ("Ring +33 1 42 68 53 00.", pii.PHONE, "+33 1 42 68 53 00"),
    ("手机 13812345678 联系", pii.PHONE, "13812345678"),
    ("Call +86 138 1234 5678", pii.PHONE, "+86 138 1234 5678"),
    ("Office 010-62345678", pii.PHONE, "010-62345678"),
    ("from 192.168.10.24 today", pii.IPV4, "192.168.10.24"),
    ("host 2001:db8:85a3::8a2e:370:7334 up", pii.IPV6, "2001:db8:85a3::8a2e:370:7334"),
    ("host fe80:1:2:3:4:5:6:7 up", pii.IPV6, "fe80:1:2:3:4:5:6:7"),
    ("card 4111 1111 1111 1111 ok", pii.CREDIT_CARD, "4111 1111 1111 1111"),
    ("card 5500-0000-0000-0004 ok", pii.CREDIT_CARD, "5500-0000-0000-0004"),
    ("amex 378282246310005.", pii.CREDIT_CARD, "378282246310005"),
    ("IBAN DE89 3704 0044 0532 0130 00 please", pii.IBAN, "DE89 3704 0044 0532 0130 00"),
    ("IBAN GB82WEST12345698765432 please", pii.IBAN, "GB82WEST12345698765432"),
    ("SSN 123-45-6789 filed", pii.US_SSN, "123-45-6789"),
    ("身份证 11010519491231002X 登记", pii.CN_RESIDENT_ID, "11010519491231002X"),
    ("key AKIAIOSFODNN7EXAMPLE set", pii.CLOUD_KEY, "AKIAIOSFODNN7EXAMPLE"),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        pii.CLOUD_KEY,
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (
        "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 leaked",
        pii.CLOUD_KEY,
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        pii.PRIVATE_KEY,
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    ),
    (
        "jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U x",
        pii.JWT,
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    ("Authorization: Bearer abcDEF123456ghiJKL789", pii.BEARER_TOKEN, "abcDEF123456ghiJKL789"),
]


@pytest.mark.parametrize("text,kind,value", POSITIVES, ids=[p[1] + str(i) for i, p in enumerate(POSITIVES)])
def test_positive_is_found_with_its_type_and_exact_span(text, kind, value):
    assert (kind, value) in types_in(text)


def test_every_type_has_a_positive_case():
    assert {p[1] for p in POSITIVES} == set(pii.ALL_TYPES) - pii.NAME_TYPES  # names: test_names.py


HARD_NEGATIVES = [
    "Reference 4111 1111 1111 1112 is not a card",  # Luhn-invalid
    "Number 1234567812345678 fails Luhn",
    "Order 13812345678 shipped",  # order id shaped like a CN mobile
    "order #4111111111111111 shipped",  # order id that happens to pass Luhn
    "Invoice INV-20240512 is due",
    "Order ORD-2024-558812 has shipped",
    "Logged at 2024-05-12T13:45:10Z",
    "Logged at 2025-01-02 03:04:05 by cron",
    "Epoch 1715523910 and 1715523910123 ms",
    "Upgrade to version 2.17.3 now",
    "Release v10.2.1 with build 1.2.3.4",
    "Python 3.11.7 and kfp 2.17.3",
    "ISBN 978-3-16-148410-0 in stock",
    "ISBN 9783161484100 in stock",
    "ISBN-10 0-306-40615-2 too",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "git commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "md5 d41d8cd98f00b204e9800998ecf8427e",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "meeting at 13:45:10 today",
    "MAC 00:1A:2B:3C:4D:5E on eth0",
    "C++ std::vector<int>::iterator it",
    "ratio 3.14159 and 2.71828",
    "IBAN-like DE89 3704 0044 0532 0130 01 wrong checksum",
    "ID 11010519491231002Y with a bad check digit",
    "SSN-like 000-12-3456 is invalid",
    "AKIA lowercase akiaiosfodnn7example is not a key",
    "the bearer of bad news arrived",
    "decorator @dsl.component is code",
    "price 1,234,567.89 dollars",
    "-----BEGIN PUBLIC KEY----- is fine",
]


@pytest.mark.parametrize("text", HARD_NEGATIVES)
def test_hard_negative_survives(text):
    assert types_in(text) == []


@pytest.mark.parametrize(
    "number,ok",
    [("4111111111111111", True), ("4111111111111112", False), ("79927398713", True), ("79927398710", False)],
)
def test_luhn(number, ok):
    assert pii.luhn_valid(number) is ok


def test_iban_mod97_and_length():
    assert pii.iban_valid("DE89370400440532013000")
    assert not pii.iban_valid("DE89370400440532013001")
    assert not pii.iban_valid("DE8937040044053201300")  # wrong length for DE
    assert not pii.iban_valid("ZZ89370400440532013000")  # unknown country


def test_cn_resident_id_check_digit_and_date():
    assert pii.cn_resident_id_valid("11010519491231002X")
    assert not pii.cn_resident_id_valid("110105194912310021")
    assert not pii.cn_resident_id_valid("110105194902300020")  # 30 February


def test_redaction_uses_typed_tokens_and_keeps_other_text():
    text = "Mail a.b@example.com or call 415-555-0132, card 4111 1111 1111 1111."
    out = pii.redact(text, pii.find_pii(text), pii.POLICIES["strict"].redact)
    assert out == "Mail [EMAIL] or call [PHONE], card [CREDIT_CARD]."
    permissive = pii.redact(text, pii.find_pii(text), pii.POLICIES["permissive"].redact)
    assert permissive == "Mail a.b@example.com or call 415-555-0132, card [CREDIT_CARD]."


def test_overlap_prefers_the_more_specific_type():
    text = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU"
    assert [t for t, _ in types_in(text)] in (["JWT"], ["BEARER_TOKEN"])


def test_labeled_corpus_recall_and_hard_negatives():
    samples = labeled_samples(2400, seed=11)
    found = total = intact = negatives = 0
    for s in samples:
        findings = pii.find_pii(s.text)
        for kind, a, b in s.positives:
            total += 1
            found += any(f.start < b and f.end > a and f.type == kind for f in findings)
        for a, b in s.negatives:
            negatives += 1
            intact += not any(f.start < b and f.end > a for f in findings)
    assert found / total >= 0.98
    assert intact / negatives >= 0.98


def test_policy_table_is_complete():
    assert set(pii.POLICIES) == {"strict", "balanced", "permissive"}
    for spec in pii.POLICIES.values():
        assert spec.redact <= set(pii.ALL_TYPES)
        assert pii.SECRET_TYPES <= spec.redact
