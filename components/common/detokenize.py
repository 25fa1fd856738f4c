"""Token ids to the answer a user reads: one rule for evaluation, the watermark stage and
the server (`answer_text`), and the same answer piece by piece as tokens come
(`TextStream`), for streaming.

A streamed piece is never taken back, so a stream sends only text that later tokens
cannot change: not a character whose bytes have not all arrived (byte-level tokenizers
split multi-byte characters over tokens; an unfinished one decodes as U+FFFD), not
trailing whitespace (the answer is stripped), not a tail that may be the start of the
stop string. The pieces joined are the answer a non-streaming request gets.
"""

from __future__ import annotations

_PARTIAL = "\ufffd"


def _decoded(tokenizer, tokens: list[int], stop: str) -> tuple[str, bool]:
    """(text before the stop string, whether the stop string was met)."""
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    if stop and stop in text:
        return text.split(stop, 1)[0], True
    return text, False


def answer_text(tokenizer, tokens: list[int], stop: str = "") -> str:
    """The answer `tokens` make: decoded without special tokens, cut at the first `stop`,
    stripped."""
    return _decoded(tokenizer, tokens, stop)[0].strip()


class TextStream:
    """One answer's text as its tokens come: `push` each token, send what it returns;
    `finish` returns the rest. `stopped` turns True when the stop string appears (the
    answer is complete: generate no more for it)."""

    def __init__(self, tokenizer, stop: str = ""):
        self.tokenizer, self.stop = tokenizer, stop
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
        text, self.stopped = _decoded(self.tokenizer, self.tokens, self.stop)
        if self.stopped:
            return self._emit(text.strip())
        safe = text.lstrip().rstrip()
        while safe.endswith(_PARTIAL):
            safe = safe[:-1].rstrip()
        for k in range(min(len(self.stop) - 1, len(safe)), 0, -1):
            if safe.endswith(self.stop[:k]):
                safe = safe[:-k].rstrip()  # the answer is stripped: no space before the stop is sent
                break
        return self._emit(safe)

    def finish(self) -> str:
        return self._emit(answer_text(self.tokenizer, self.tokens, self.stop))
