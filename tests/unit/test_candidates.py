"""The Hyperscan candidate search may only skip a line that `find_pii` (or, names on, the
name finder's candidate pass) finds nothing in, however the line was JSON-encoded; and it
must skip most plain text, or it buys nothing."""

import importlib
import json
import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfp_llmops.components.data_validation import names, pii
from kfp_llmops.components.data_validation import stream as streaming
from kfp_llmops.components.data_validation.candidates import NAMES, NONE, candidate_lines, line_kinds
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.outputs import OutputPaths
from tests import pii_corpus
from tests.benchmarks.corpus import write_corpus

# The package exports the function `validate` under the module's name.
engines = importlib.import_module("kfp_llmops.components.data_validation.engines")


def may_hold_pii(raw: bytes) -> bool:
    """Does any candidate match the line (of any family)?"""
    return line_kinds(raw) != NONE


def _encodings(text: str) -> list[bytes]:
    """The ways a writer may put `text` on a line: ASCII-escaped, raw UTF-8, every
    character escaped, and nested in a conversation."""
    return [
        json.dumps({"prompt": text}).encode(),
        orjson.dumps({"prompt": text}),
        b'{"prompt": "'
        + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in text).encode("utf-8", "surrogatepass")
        + b'"}',
        orjson.dumps({"messages": [{"role": "user", "content": text}]}),
    ]


def _assert_superset(text: str) -> None:
    """Every way of writing `text` is a candidate line, and scanning only the families
    its candidates name finds what scanning every family does."""
    found = pii.find_pii(text)
    if found:
        for raw in _encodings(text):
            assert may_hold_pii(raw), (text, raw)
            assert pii.find_pii(text, line_kinds(raw)) == found, (text, raw)


def test_every_labeled_finding_is_a_candidate():
    samples = pii_corpus.labeled_samples(3000, seed=11) + pii_corpus.name_samples(500, seed=11)
    found = 0
    for s in samples:
        found += bool(pii.find_pii(s.text))
        _assert_superset(s.text)
    assert found > 1000  # the corpus does exercise the recognizers


_GENERATORS = (
    pii_corpus.card,
    pii_corpus.iban,
    pii_corpus.cn_id,
    pii_corpus.ssn,
    pii_corpus.email,
    pii_corpus.phone,
    pii_corpus.ipv4,
    pii_corpus.ipv6,
    pii_corpus.jwt,
    pii_corpus.cloud_key,
    pii_corpus.private_key,
    pii_corpus.bearer,
)


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), left=st.text(max_size=6), right=st.text(max_size=6))
def test_generated_pii_in_any_surroundings(seed, left, right):
    rng = random.Random(seed)
    _assert_superset(left + _GENERATORS[rng.randrange(len(_GENERATORS))](rng) + right)


@settings(max_examples=600, deadline=None)
@given(text=st.text(alphabet="0123456789 -().+:@.xXAZGBDEaf/_=\n\u2000中", max_size=40) | st.text(max_size=80))
def test_shaped_noise(text):
    _assert_superset(text)


def test_plain_text_is_not_a_candidate():
    assert not may_hold_pii(
        orjson.dumps(
            {
                "prompt": "What is the capital of France? (request 123456)",
                "response": "Paris. Hope that helps. 中文回答：巴黎。",
            }
        )
    )
    assert not may_hold_pii(json.dumps({"prompt": "Wie heißt die Hauptstadt?", "response": "Berlin"}).encode())
    assert may_hold_pii(b'{"prompt": "mail me at a.b@example.org"}')
    assert may_hold_pii(b'{"prompt": "\\u0031"}')  # an escaped ASCII digit: looked at, not guessed


@pytest.mark.parametrize("names", [False, True])
def test_outputs_equal_scanning_every_line(tmp_path, monkeypatch, names):
    """The gate changes nothing: the same clean, quarantine and stats as scanning every
    string of every line for every family."""
    corpus = tmp_path / "in.jsonl"
    write_corpus(str(corpus), 600_000 if not names else 300_000, seed=3)
    config = DataValidationConfig()
    config.gate.max_reject_rate = 1.0
    config.pii.names.enabled = names
    outputs = []
    for gate in (True, False):
        if not gate:
            monkeypatch.setattr(
                streaming, "candidate_lines", lambda lines, with_names=False: dict.fromkeys(range(len(lines)))
            )
        out = OutputPaths.in_dir(str(tmp_path / f"out-{gate}"))
        result = engines.validate(str(corpus), out, config, show_progress=False)
        outputs.append(
            [open(p, "rb").read() for p in (out.clean, out.quarantine, out.stats)]
            + [result.metrics["merkle_root"], result.metrics["pii_found"]]
        )
    assert outputs[0] == outputs[1]
    assert outputs[0][4]  # there were findings to keep


_FINDER = names.NameFinder(lambda asked: [None] * len(asked))


def may_hold_a_name(raw: bytes) -> bool:
    kinds = candidate_lines([raw], with_names=True).get(0, NONE)
    return kinds is None or NAMES in kinds


def _assert_names_superset(text: str) -> bool:
    found = bool(_FINDER.candidates(text))
    if found:
        for raw in _encodings(text):
            assert may_hold_a_name(raw), (text, raw)
    return found


def test_every_name_candidate_is_a_names_candidate():
    """On the labeled corpora, the one tuned on and the held-out ones (names and addresses
    nobody tuned for, English and Chinese), in every encoding."""
    from tests.faker_corpus import faker_samples

    samples = (
        pii_corpus.name_samples(1500, seed=13)
        + pii_corpus.labeled_samples(1500, seed=13)
        + pii_corpus.held_out_samples()
        + faker_samples("tune", 100)
        + faker_samples("held_out", 100)
    )
    assert sum(_assert_names_superset(s.text) for s in samples) > 1000


_PIECES = (
    *sorted(names.TITLES),
    *"Dr. Mr. Mrs Ms. St. Ave Box PO P.O. Apt #".split(),
    *"Maria Will May Garcia Smith O'Brien Jean-Luc McDonald Müller Zoë Ólafur Baker Street".split(),
    *"my name is|I'm|I am|this is|Dear|Hi|hello|Thanks|Thank you|Cheers|call me|signed|regards|name:".split("|"),
    *"王 李 欧阳 先生 女士 我是 叫 北京市 朝阳区 建国路 号 省 县 街 座".split(),
    *"the and of in what is 42 7B 221B 10001 , . ! ? : ; ' - \" \u2019".split(),
)


@settings(max_examples=1500, deadline=None)
@given(
    parts=st.lists(st.sampled_from(_PIECES), max_size=8),
    seps=st.lists(st.sampled_from([" ", "", ", ", ". ", "  ", "\n", "\t"]), min_size=8, max_size=8),
)
def test_names_in_any_arrangement(parts, seps):
    _assert_names_superset("".join(p + s for p, s in zip(parts, seps, strict=False)))


@settings(max_examples=600, deadline=None)
@given(text=st.text(alphabet="AaBbMmZzDrsSPOx .,'-:0123456789\n中À", max_size=40) | st.text(max_size=60))
def test_names_shaped_noise(text):
    _assert_names_superset(text)


def test_plain_text_is_no_names_candidate():
    """The bench corpus's plain rows skip the name finder; a name, a non-ASCII character
    or an escape never does."""
    assert not may_hold_a_name(
        orjson.dumps({"prompt": "What is 1 plus 5? (request 4)", "response": "1 plus 5 is 6. Hope that helps."})
    )
    assert may_hold_a_name(b'{"prompt": "ask Maria Garcia"}')
    assert may_hold_a_name(b'{"prompt": "\\u00e9"}')
    assert may_hold_a_name(orjson.dumps({"prompt": "客户信息：朱英，"}))


@pytest.mark.parametrize("rule", ["cue", "title", "pair", "number", "box"])
def test_each_rule_of_the_name_finder_is_a_names_candidate(rule):
    """Every rule that makes a candidate, each in its own words, in both cases."""
    capitals = ["Maria", "Priya", "Will", "O'Brien", "Jean-Luc", "McDonald", "DAngelo", "Garcia", "Baker"]
    cues = f"{names._STRONG_CUES}|{names._WEAK_CUES}".split("|")
    heads = {
        "cue": [f"{c2}{sep}" for c in cues for c2 in (c, c.title(), c.upper()) for sep in (" ", ", ", "  ")],
        "title": [f"{t2}{sep}" for t in names.TITLES for t2 in (t.title(), t.upper()) for sep in (" ", ". ")],
        "pair": [f"{c} " for c in capitals],
        "number": ["42 ", "7B ", "221B, ", "1600 North "],
        "box": ["PO ", "P.O. ", "P. O. "],
    }[rule]
    tails = ["Box 123, Springfield", "Street"] if rule == "box" else [*capitals, "Baker Street", "Smith"]
    if rule == "number":  # an address whose every word ends in a period
        tails += ["Abc. Street", "N. Abc. St.", "Mt. Vernon Ave."]
    if rule == "title":  # as `_key` reads a title: apostrophes and hyphens dropped; an initial
        heads += ["D'r. ", "Mr-s. ", "MaDam. ", "Ma'am. "]
        tails += ["X", "X."]
    found = sum(_assert_names_superset(f"then {head}{tail} said so.") for head in heads for tail in tails)
    assert found  # the rule does make candidates here


@pytest.mark.parametrize("before", [" ", "x ", "\n", "\t", '"', "\\", "/", "\u2000", "\u00a0", "中", "12 "])
def test_a_card_after_any_character_json_may_escape(before):
    """A card's candidate reads the raw line, where the character before its digits may
    be the tail of an escape (`\\n`, `\\u2000`): the family is named all the same."""
    for card in ("4111111111111111", "4111 1111 1111 1111", "5500-0000-0000-0004"):
        text = f"pay with{before}{card} today"
        assert any(f.type == pii.CREDIT_CARD for f in pii.find_pii(text)), text
        _assert_superset(text)


@pytest.mark.parametrize("after", ["\n", "\t", '"', "\\", "/", " ", ""])
def test_escaped_chinese_before_any_escape_is_a_names_candidate(after):
    """Written ASCII-only, a run of Han characters is a run of `\\u` escapes, matched at
    its last: whatever follows it (another escape among them) the line is a candidate."""
    for text in (f"客户信息：朱英{after}", f"我是张伟{after}x", f"{after}王先生"):
        raw = json.dumps({"prompt": text}).encode()
        assert _FINDER.candidates(text), text
        assert may_hold_a_name(raw), raw
