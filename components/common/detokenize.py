"""Token ids to the answer a user reads: one rule for evaluation, the watermark stage and
the server (`answer_text`), and the same answer piece by piece as tokens come
(`TextStream`), for streaming.

A streamed piece is never taken back, so a stream sends only text that later tokens
cannot change: not a character whose bytes have not all arrived (byte-level tokenizers
split multi-byte characters over tokens; an unfinished one decodes as U+FFFD), not
trailing whitespace (the answer is stripped), not a tail that may be the start of a
stop string. The pieces joined are the answer a non-streaming request gets.

`stop` is one string or several (OpenAI's `stop` takes up to four): the answer ends
before whichever of them is complete first as it is generated.
"""

from __future__ import annotations

from collections.abc import Sequence

_PARTIAL = "\ufffd"


def stops_of(stop: str | Sequence[str]) -> tuple[str, ...]:
    """The non-empty stop strings `stop` names."""
    return tuple(s for s in ((stop,) if isinstance(stop, str) else stop) if s)


def _decoded(tokenizer, tokens: list[int], stops: tuple[str, ...]) -> tuple[str, bool]:
    """(text before the stop string met first, whether one was met). Met first: the one
    whose first occurrence ends first (then the one starting first), so a whole answer is
    cut where its generation stopped, a token at a time: a stop that starts earlier but
    ends later was never complete when the other ended the answer."""
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    found = [(at + len(s), at) for s in stops if (at := text.find(s)) >= 0]
    return (text[: min(found)[1]], True) if found else (text, False)


def answer_text(tokenizer, tokens: list[int], stop: str | Sequence[str] = "") -> str:
    """The answer `tokens` make: decoded without special tokens, cut before the first stop
    string in it, stripped."""
    return _decoded(tokenizer, tokens, stops_of(stop))[0].strip()


class TextStream:
    """One answer's text as its tokens come: `push` each token, send what it returns;
    `finish` returns the rest. `stopped` turns True when a stop string appears (the
    answer is complete: generate no more for it)."""

    def __init__(self, tokenizer, stop: str | Sequence[str] = ""):
        self.tokenizer, self.stops = tokenizer, stops_of(stop)
        self.tokens: list[int] = []
        self.sent = ""
        self.stopped = False
        self.diverged = False  # a later token changed text already sent (never seen; counted if it is)

    def _emit(self, text: str) -> str:
        if not text.startswith(self.sent):
            self.diverged = True
            return ""
        piece, self.sent = text[len(self.sent) :], text
        return piece

    def push(self, token: int) -> str:
        self.tokens.append(token)
        text, self.stopped = _decoded(self.tokenizer, self.tokens, self.stops)
        if self.stopped:
            return self._emit(text.strip())
        safe = text.lstrip().rstrip()
        while safe.endswith(_PARTIAL):
            safe = safe[:-1].rstrip()
        held = max((_held(safe, stop) for stop in self.stops), default=0)
        if held:
            safe = safe[:-held].rstrip()  # the answer is stripped: no space before a stop is sent
        return self._emit(safe)

    def finish(self) -> str:
        return self._emit(answer_text(self.tokenizer, self.tokens, self.stops))


def _held(text: str, stop: str) -> int:
    """How many characters at the end of `text` may be the start of `stop`."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0
