"""The record shapes supervised fine-tuning data comes in, read once for every stage:

- `{"messages": [{"role", "content"}, ...]}`: a conversation (OpenAI's fine-tuning
  format, TRL's conversational datasets): system, user and assistant turns, multi-turn;
- `{"prompt", "completion"}` (TRL's prompt-completion) and `{"prompt", "response"}`:
  one user turn and the assistant's answer;
- `{"text"}`: plain text, trained on whole.

A conversation is a list of `{"role", "content"}` turns. Validation quarantines a bad one
with the reason and the turn (`messages[2].role`); training, evaluation and watermark
verification refuse it naming the file and line. For evaluation, the prompt is the
conversation up to its last assistant turn and the reference is that turn.
"""

from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant")

# What a model is prompted with: a user's text, or the turns of a conversation so far.
Prompt = str | list


class TurnError(ValueError):
    """A conversation that cannot be trained on: the reason code, the field and what is wrong."""

    def __init__(self, reason: str, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.reason, self.field, self.detail = reason, field, detail


def check_turns(value: Any, field: str = "messages", min_chars: int = 1) -> list[dict]:
    """The turns of a conversation that ends with an assistant turn, as plain
    `{"role", "content"}` dicts; TurnError otherwise."""
    turns = _turns(value, field, min_chars)
    if turns[-1]["role"] != "assistant":
        raise TurnError(
            "no_assistant_turn",
            f"{field}[{len(turns) - 1}].role",
            f"the conversation ends with a {turns[-1]['role']} turn; SFT needs it to end with the assistant's",
        )
    if not any(t["role"] == "user" for t in turns):
        raise TurnError("bad_turn", field, "no user turn")
    return turns


def prompt_turns(value: Any, field: str = "messages", max_turns: int = 0, max_chars: int = 0) -> list[dict]:
    """The turns of a chat request: a conversation that ends with the user's turn, which
    the answer follows; TurnError otherwise. A server's bounds (`max_turns`, `max_chars`
    over all turns; 0: none) are checked before anything renders or tokenizes it."""
    if max_turns and isinstance(value, list) and len(value) > max_turns:
        raise TurnError("too_long", field, f"{len(value)} turns; this server takes at most {max_turns}")
    turns = _turns(value, field, 1)
    chars = sum(len(t["content"]) for t in turns)
    if max_chars and chars > max_chars:
        raise TurnError("too_long", field, f"{chars} characters; this server takes at most {max_chars}")
    if turns[-1]["role"] != "user":
        raise TurnError(
            "bad_turn",
            f"{field}[{len(turns) - 1}].role",
            f"the conversation ends with a {turns[-1]['role']} turn; a request ends with the user's",
        )
    return turns


def _turns(value: Any, field: str, min_chars: int) -> list[dict]:
    if not isinstance(value, list):
        raise TurnError("wrong_type", field, f"expected a list of turns, got {type(value).__name__}")
    if not value:
        raise TurnError("no_assistant_turn", field, "empty conversation")
    turns = []
    for i, turn in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(turn, dict):
            raise TurnError("bad_turn", where, f"expected an object with role and content, got {type(turn).__name__}")
        role, content = turn.get("role"), turn.get("content")
        if role not in ROLES:
            raise TurnError("unknown_role", f"{where}.role", f"unknown role {role!r} (known: {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise TurnError(
                "wrong_type",
                f"{where}.content",
                f"expected a string, got {type(content).__name__ if content is not None else 'nothing'}",
            )
        if len(content.strip()) < max(1, min_chars):
            raise TurnError(
                "empty_turn",
                f"{where}.content",
                f"{role} turn is empty" if not content.strip() else f"{len(content.strip())} < min_chars {min_chars}",
            )
        if role == "system" and i:
            raise TurnError("bad_turn", f"{where}.role", "a system turn must come first")
        turns.append({"role": role, "content": content})
    return turns


def record_turns(row: dict) -> list[dict] | None:
    """The conversation a record holds (a prompt and its answer are two turns), or None for
    a plain-text record; TurnError or KeyError (no known shape) otherwise."""
    if "messages" in row:
        return check_turns(row["messages"])
    if "prompt" in row and ("response" in row or "completion" in row):
        field = "response" if "response" in row else "completion"
        for name in ("prompt", field):
            if not isinstance(row[name], str):
                raise TurnError("wrong_type", name, f"expected a string, got {type(row[name]).__name__}")
        return [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row[field]}]
    if "text" in row:
        if not isinstance(row["text"], str):
            raise TurnError("wrong_type", "text", f"expected a string, got {type(row['text']).__name__}")
        return None
    raise KeyError("messages, prompt/response, prompt/completion or text")


def split_last(turns: list[dict]) -> tuple[Prompt, str]:
    """(prompt, reference): the conversation before its last assistant turn, and that turn.
    A single user turn is prompted as its text, as a prompt/response record is."""
    head = turns[:-1]
    prompt: Prompt = head[0]["content"] if len(head) == 1 and head[0]["role"] == "user" else head
    return prompt, turns[-1]["content"]


def as_turns(prompt: Prompt) -> list[dict]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def prompt_text(prompt: Prompt) -> str:
    """A prompt as one string, for reports and text judges: a conversation's turns as
    `role: content` lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{t['role']}: {t['content']}" for t in prompt)
