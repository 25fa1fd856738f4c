"""The bundled demo dataset: templated, coherent Q&A a tiny model can learn, with
deliberate PII, duplicates and malformed lines, open-ended requests answered with prose,
plus a held-out eval set; and the stage configs the demo runs it with.

The eval set asks facts the training data teaches, in phrasings the training data never
uses (no eval prompt appears in train.jsonl): a 2 M-parameter model cannot know a capital
it never saw, but it can learn to answer a question however it is framed, and the
evaluation report shows whether it did (exact match against the reference).

Deterministic for a given seed, so every demo run and test sees the same bytes.
"""

from __future__ import annotations

import json
import os
import random
import re

_CAPITALS = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("China", "Beijing"),
    ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"),
    ("Canada", "Ottawa"),
    ("Brazil", "Brasilia"),
    ("Peru", "Lima"),
    ("Chile", "Santiago"),
    ("India", "New Delhi"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"),
    ("Poland", "Warsaw"),
    ("Greece", "Athens"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
    ("Ireland", "Dublin"),
    ("Cuba", "Havana"),
    ("Mexico", "Mexico City"),
    ("Turkey", "Ankara"),
    ("Russia", "Moscow"),
    ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"),
    ("Australia", "Canberra"),
    ("Argentina", "Buenos Aires"),
    ("Hungary", "Budapest"),
]
_OPPOSITES = [
    ("hot", "cold"),
    ("big", "small"),
    ("fast", "slow"),
    ("up", "down"),
    ("light", "dark"),
    ("happy", "sad"),
    ("old", "young"),
    ("open", "closed"),
    ("early", "late"),
    ("full", "empty"),
    ("hard", "soft"),
    ("wet", "dry"),
    ("near", "far"),
    ("tall", "short"),
    ("rich", "poor"),
    ("loud", "quiet"),
    ("clean", "dirty"),
    ("strong", "weak"),
]
_SOUNDS = [
    ("cow", "moo"),
    ("dog", "woof"),
    ("cat", "meow"),
    ("duck", "quack"),
    ("sheep", "baa"),
    ("hen", "cluck"),
    ("horse", "neigh"),
    ("owl", "hoot"),
    ("lion", "roar"),
    ("frog", "croak"),
    ("bee", "buzz"),
    ("snake", "hiss"),
    ("mouse", "squeak"),
    ("crow", "caw"),
]
# (No pig or rooster: alt-profanity-check flags "A pig says oink." at 0.93 and the
# rooster's call at 0.98, so the references themselves would fail the toxicity gate.)
_COLORS = [
    ("a ripe banana", "yellow"),
    ("the clear sky", "blue"),
    ("fresh grass", "green"),
    ("a ripe tomato", "red"),
    ("fresh snow", "white"),
    ("coal", "black"),
    ("an orange", "orange"),
    ("a lemon", "yellow"),
    ("a plum", "purple"),
    ("a carrot", "orange"),
    ("milk", "white"),
    ("a strawberry", "red"),
    ("a pine tree", "green"),
    ("chocolate", "brown"),
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_WORDS = [
    "cat",
    "dog",
    "tree",
    "house",
    "river",
    "apple",
    "stone",
    "cloud",
    "bread",
    "light",
    "music",
    "paper",
    "green",
    "water",
    "smile",
    "train",
    "chair",
    "plant",
    "horse",
    "ocean",
]
_PLURALS = [
    ("mouse", "mice"),
    ("child", "children"),
    ("foot", "feet"),
    ("tooth", "teeth"),
    ("goose", "geese"),
    ("man", "men"),
    ("woman", "women"),
    ("person", "people"),
    ("leaf", "leaves"),
    ("knife", "knives"),
    ("wolf", "wolves"),
    ("box", "boxes"),
    ("city", "cities"),
    ("baby", "babies"),
    ("bus", "buses"),
    ("cactus", "cacti"),
]
_ASK = [
    "{q}",
    "Question: {q}",
    "Please answer: {q}",
    "Can you tell me this? {q}",
    "Hi! {q}",
    "Here is a question. {q}",
    "Answer this: {q}",
    "Q: {q}",
]
_PASSES = ["{p}", "{p} Answer briefly.", "Quick one: {p}", "{p} One sentence, please.", "{p} Thanks.", "Hello. {p}"]
# Open-ended requests answered by one of many sentences of the Python language reference
# (`common.prose`): free text with real entropy, which a text watermark needs to be found
# at a small delta, beside the facts, whose answers it must not change.
_OPEN = [
    "Write a sentence about Python.",
    "Tell me something about Python.",
    "Say something about the language.",
    "Quote the Python reference.",
    "Write one line about Python semantics.",
]
# Open-ended prompts training never uses: what verify_watermark's long texts continue in the demo.
OPEN_HELD_OUT = [
    "Tell me about Python.",
    "Write about the Python language.",
    "Say something about Python.",
    "Describe a Python rule.",
]
_PROSE_CHARS = re.compile(r"[0-9@_()\[\]{}'\"`*=<>]")
# Framings only the eval set uses.
_HELD_OUT = ["Tell me: {q}", "{q} Thank you!", "Quiz: {q}", "I wonder. {q}"]
_NAMES = ["alice", "bob", "chen.wei", "dana", "erik", "fatima", "george", "hana"]
_DOMAINS = ["example.com", "mail.example.org", "corp.example.net"]
# Person names and postal addresses, English and Chinese (redacted as [PERSON]/[ADDRESS]).
_PEOPLE = ["Maria Garcia", "James Wright", "Aisha Patel", "Lucas Novak", "Hannah Kim", "Omar Haddad"]
_STREETS = ["Baker Street", "Maple Avenue", "Mill Road", "Church Lane", "Sunset Boulevard"]
_ZH_PEOPLE = ["张伟", "李小明", "王芳", "陈建国", "欧阳娜娜"]
_ZH_ADDRESSES = ["北京市朝阳区建国路{n}号", "上海市浦东新区世纪大道{n}号", "广州市天河区体育西路{n}号"]


def _qa_items() -> list[tuple[str, str, str]]:
    """(key, question, answer) for every fact the training data teaches."""
    items = []
    for a in range(1, 13):
        for b in range(1, 13):
            items.append((f"add{a}+{b}", f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."))
    for a in range(2, 10):
        for b in range(2, 10):
            items.append((f"mul{a}*{b}", f"What is {a} times {b}?", f"{a} times {b} is {a * b}."))
    for country, city in _CAPITALS:
        items.append((f"cap{country}", f"What is the capital of {country}?", f"The capital of {country} is {city}."))
    for word, opp in _OPPOSITES:
        items.append((f"opp{word}", f"What is the opposite of {word}?", f"The opposite of {word} is {opp}."))
        items.append((f"opp{opp}", f"What is the opposite of {opp}?", f"The opposite of {opp} is {word}."))
    for animal, sound in _SOUNDS:
        items.append((f"snd{animal}", f"What sound does a {animal} make?", f"A {animal} says {sound}."))
    for thing, color in _COLORS:
        items.append((f"col{thing}", f"What color is {thing}?", f"{thing[0].upper()}{thing[1:]} is {color}."))
    for i, day in enumerate(_DAYS):
        nxt = _DAYS[(i + 1) % 7]
        items.append((f"day{day}", f"What day comes after {day}?", f"The day after {day} is {nxt}."))
    for word in _WORDS:
        items.append((f"rev{word}", f"Spell the word {word} backwards.", f"{word} backwards is {word[::-1]}."))
    for one, many in _PLURALS:
        items.append((f"plu{one}", f"What is the plural of {one}?", f"The plural of {one} is {many}."))
    return items


def _email(rng: random.Random) -> str:
    return f"{rng.choice(_NAMES)}{rng.randint(1, 99)}@{rng.choice(_DOMAINS)}"


def _phone(rng: random.Random) -> str:
    return rng.choice(
        [
            f"+1 415 555 {rng.randint(1000, 9999)}",
            f"(212) 555-{rng.randint(1000, 9999)}",
            f"+44 20 7946 {rng.randint(1000, 9999)}",
            f"138{rng.randint(10000000, 99999999)}",
        ]
    )


def _name_or_address(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return f" My name is {rng.choice(_PEOPLE)}."
    if kind == 1:
        return f" Please reply to my home at {rng.randint(2, 990)} {rng.choice(_STREETS)}."
    if kind == 2:
        return f" 我叫{rng.choice(_ZH_PEOPLE)}。"
    return f" 我住在{rng.choice(_ZH_ADDRESSES).format(n=rng.randint(1, 300))}。"


def make_demo_dataset(out_dir: str, rows: int = 4000, eval_rows: int = 200, seed: int = 7, train: bool = True) -> dict:
    """Write `train.jsonl` (`rows` fact rows with deliberate faults, and a quarter as many
    open-ended prose rows; not with `train=False`, when the user brings their own) and
    `eval.jsonl` (held-out phrasings of `eval_rows` facts)."""
    rng = random.Random(seed)
    facts = _qa_items()
    rng.shuffle(facts)
    eval_items = facts[:eval_rows]
    framings = [(a, p) for p in _PASSES for a in _ASK]
    os.makedirs(out_dir, exist_ok=True)
    lines: list[bytes] = []
    faults = {"pii_redacted": 0, "pii_dense": 0, "duplicates": 0, "malformed": 0}
    seen: list[bytes] = []
    for i in range(rows):
        fact = i % len(facts)
        key, q, a = facts[fact]
        # Each pass over the facts frames a fact differently, so passes never repeat a row.
        ask, frame = framings[(i // len(facts) + 7 * fact) % len(framings)]
        prompt = frame.format(p=ask.format(q=q))
        roll = rng.random()
        if roll < 0.03:
            pick = rng.random()
            prompt += (
                f" You can reach me at {_email(rng) if pick < 0.25 else _phone(rng)}."
                if pick < 0.5
                else _name_or_address(rng)
            )
            faults["pii_redacted"] += 1
        line = json.dumps({"prompt": prompt, "response": a}).encode()
        if 0.03 <= roll < 0.04 and seen:
            dup = json.loads(rng.choice(seen))
            dup["prompt"] = "  " + dup["prompt"].upper() + " "
            line = json.dumps(dup).encode()
            faults["duplicates"] += 1
        elif 0.04 <= roll < 0.045:
            line = rng.choice(
                [
                    b'{"prompt": "What is 2 plus 2?", "response": "2 plus 2 is 4."',
                    b'{"prompt": "hello", "answer": "missing response field"}',
                    b'{"prompt": "bad bytes \xff\xfe here", "response": "x"}',
                    b"",
                    b'["not", "an", "object"]',
                    b'{"prompt": 42, "response": "wrong type"}',
                    b'{"prompt": "empty response", "response": "   "}',
                ]
            )
            faults["malformed"] += 1
        elif 0.045 <= roll < 0.047:
            contacts = ", ".join(_email(rng) for _ in range(4))
            line = json.dumps({"prompt": f"Contacts: {contacts}", "response": _phone(rng)}).encode()
            faults["pii_dense"] += 1
        else:
            seen.append(line)
        lines.append(line)
    prose = _prose_lines(rows // 4, seed)
    picks = random.Random(seed + 1)
    for line in prose:  # spread through the file, the facts' order kept
        lines.insert(picks.randrange(len(lines) + 1), line)
    train_path = os.path.join(out_dir, "train.jsonl") if train else None
    if train_path:
        with open(train_path, "wb") as handle:
            handle.write(b"\n".join(lines) + b"\n")
    eval_path = os.path.join(out_dir, "eval.jsonl")
    with open(eval_path, "w", encoding="utf-8") as handle:
        for n, (_key, q, a) in enumerate(eval_items):
            prompt = _HELD_OUT[n % len(_HELD_OUT)].format(q=q)
            handle.write(json.dumps({"id": f"eval-{n:04d}", "prompt": prompt, "response": a}) + "\n")
    return {
        "train": train_path,
        "eval": eval_path,
        "rows": rows + len(prose),
        "fact_rows": rows,
        "prose_rows": len(prose),
        "eval_rows": len(eval_items),
        "faults": faults,
    }


def _prose_lines(count: int, seed: int) -> list[bytes]:
    """`count` open-ended requests, each answered by a short sentence of the language reference."""
    from kfp_llmops.components.common.prose import SHORT_WORDS, sentences

    pool = [s for s in sentences() if len(s.split()) <= SHORT_WORDS and not _PROSE_CHARS.search(s)]
    pairs = [(p, s) for p in _OPEN for s in pool]  # each pair once: no duplicate rows
    random.Random(seed + 2).shuffle(pairs)
    return [json.dumps({"prompt": p, "response": s}).encode() for p, s in pairs[:count]]


# The demo's delta is the one its quality-cost gate accepts with room. Detection is measured
# on open-ended prompts (free text, as in KGW's own evaluation; the demo data teaches prose
# for them), the cost on the held-out facts, answered as evaluation blessed them. On the
# demo model (one key), every delta from 2 on detects all texts; delta 2 costs
# 7 % of the exact answers, perplexity +2 %, BERTScore F1 -0.012 and a judge's win rate of
# 0.47; 2.5 costs 10 %, +3.5 %, -0.020 and 0.45, each at the gate's edge; 3 costs 14.5 %
# and 4 costs 26.5 %, both refused. The report draws the curve.
DEMO_DETECTION = (
    "delta: 2.0\n"
    f"generation: {{max_new_tokens: 112, min_new_tokens: 112, texts: 200, "
    f"prompts: {json.dumps(OPEN_HELD_OUT)}}}\n"
    "quality: {deltas: [2.0, 2.5, 3.0, 4.0]}\n"
)
# The cost gate is the demo model's: a barely trained test model (`tiny`) is verified
# with DEMO_DETECTION alone, its costs reported.
DEMO_WATERMARK = DEMO_DETECTION + (
    "gate: {max_exact_match_cost: 0.10, max_perplexity_increase: 0.10, "
    "max_bertscore_cost: 0.02, min_judge_win_rate: 0.45}\n"
)


# Long enough for the demo model to learn the facts, framing aside: the held-out eval set
# asks them in phrasings training never used, and the blessing gate checks the answers.
DEMO_TRAIN = "steps: 1200\nmicro_batch: 16\ncheckpoint_interval: 300\n"


# Short intervals keep the demo quick; the watermark is served with the parameters the
# watermark stage verified (DEMO_WATERMARK's). The serving state persists in the run
# folder, so a second `make demo` rolls out a canary against the version the first one
# promoted. vLLM's engine takes about 40 s to start on 2 cores (longer on one, beside
# another): the startup bound leaves room.
DEMO_DEPLOY = "interval_s: 5\nsteps: [25, 50, 100]\nsmoke: {max_new_tokens: 64}\nlocal: {startup_timeout_s: 300}\n"


def write_demo_configs(out_dir: str) -> dict[str, str]:
    """The stage configs `make demo` runs the demo dataset with, as files, so the stages can
    be run one by one from the command line as the pipeline runs them."""
    written = {}
    for name, text in (("train", DEMO_TRAIN), ("watermark", DEMO_WATERMARK), ("deploy", DEMO_DEPLOY)):
        written[name] = os.path.join(out_dir, f"{name}.yaml")
        with open(written[name], "w", encoding="utf-8") as handle:
            handle.write(text)
    return written
