"""English prose that ships with every CPython: the language reference's sentences
(`pydoc_data.topics`). Unrelated to any task here, so it serves as "ordinary text": the
BERTScore baseline's random pairs, the demo toxicity head's neutral examples, and the
general text evaluation measures forgetting on. The demo data's answers use only short
sentences (at most SHORT_WORDS words), the forgetting passages only longer ones, so the
passages stay held out from training. A patch release of Python may edit a few sentences."""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
SHORT_WORDS = 22  # the longest sentence demo data may train on


def sentences() -> list[str]:
    """Prose sentences of 8 to 40 words from the language reference, in a fixed order."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            if block.startswith((" ", "\t")) or ">>>" in block:  # code, not prose
                continue
            for s in _SENTENCE.split(" ".join(block.split())):
                words = s.split()
                if 8 <= len(words) <= 40 and s[-1] in ".!?" and sum(c.isalpha() for c in s) > 0.7 * len(s):
                    out.append(s)
    return list(dict.fromkeys(out))


def held_out_passages(count: int = 32, words: int = 120) -> list[str]:
    """`count` passages of about `words` words, each consecutive long sentences (more than
    SHORT_WORDS words) of the reference, in a fixed order: text no demo data trains on."""
    out, passage = [], []
    for sentence in (s for s in sentences() if len(s.split()) > SHORT_WORDS):
        passage.append(sentence)
        if sum(len(s.split()) for s in passage) >= words:
            out.append(" ".join(passage))
            passage = []
            if len(out) == count:
                break
    return out
