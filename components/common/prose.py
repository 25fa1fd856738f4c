"""English prose that ships with every CPython: the language reference's sentences
(`pydoc_data.topics`). Unrelated to any task here, so it serves as "ordinary text": the
BERTScore baseline's random pairs and the demo toxicity head's neutral examples. A patch
release of Python may edit a few sentences."""
from __future__ import annotations

import re

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def sentences() -> list[str]:
    """Prose sentences of 8 to 40 words from the language reference, in a fixed order."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            if block.startswith((" ", "\t")) or ">>>" in block:        # code, not prose
                continue
            for s in _SENTENCE.split(" ".join(block.split())):
                words = s.split()
                if 8 <= len(words) <= 40 and s[-1] in ".!?" and sum(c.isalpha() for c in s) > 0.7 * len(s):
                    out.append(s)
    return list(dict.fromkeys(out))
