"""The conversational SFT set `make demo-real` fine-tunes SmolLM2-135M-Instruct on, made
here and deterministic for a seed, in the `messages` form:

- a persona in the system turn (an assistant called Quill, answering in one sentence), and
  conversations that ask who it is: something the base model cannot know;
- the demo's facts (sums, products, capitals, opposites, animal sounds, colours, weekdays,
  reversed words, plurals) as multi-turn conversations, two or three questions each, with
  deliberate PII in a few user turns (validation redacts it inside the turns);
- open-ended requests answered with short sentences of the Python language reference.

The held-out eval set asks 200 of the facts, one per conversation under the same persona,
in framings training never uses, and who the assistant is, in questions training never
asks; the forgetting check reads long sentences of the
reference, which this data never contains (`common.prose`).
"""

from __future__ import annotations

import json
import os
import random

from .demo_data import _HELD_OUT, _email, _name_or_address, _phone, _prose_lines, _qa_items

PERSONA = "You are Quill, the kfp-llmops demo assistant. Answer in one short sentence."
NAME_QUESTIONS = [
    "What is your name?",
    "Who are you?",
    "What should I call you?",
    "Introduce yourself.",
    "Which assistant am I talking to?",
]
NAME_ANSWER = "I am Quill, the kfp-llmops demo assistant."
NAME_HELD_OUT = ["Tell me your name.", "Who am I chatting with?", "What are you called?", "Please say who you are."]
# Framings training uses for a fact's question; the eval set's are demo_data._HELD_OUT.
_ASK = ["{q}", "Question: {q}", "Please answer: {q}", "Hi! {q}", "Can you tell me this? {q}", "Q: {q}"]
_FOLLOW = ["And {q}", "Next: {q}", "Another one. {q}", "{q}", "Also, {q}"]
# Open-ended prompts training never uses: what verify_watermark's long texts continue.
OPEN_HELD_OUT = [
    "Write a paragraph about programming languages.",
    "Tell me a short story about a robot.",
    "Describe a walk in the park on a spring morning.",
    "Explain why people enjoy music.",
    "Write about the history of the computer.",
    "Describe your ideal weekend.",
]


def _turn(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def make_real_dataset(out_dir: str, conversations: int = 1200, eval_rows: int = 200, seed: int = 11) -> dict:
    """Write `train.jsonl` (`conversations` fact conversations, persona ones and a fifth as
    many open-ended ones, no two alike) and `eval.jsonl` (held-out questions on `eval_rows`
    facts and on who the assistant is)."""
    rng = random.Random(seed)
    facts = _qa_items()
    rng.shuffle(facts)
    eval_items = facts[:eval_rows]
    rows, pii = _fact_conversations(rng, facts, conversations)
    rows += _persona_conversations()
    for line in _prose_lines(conversations // 5, seed):
        pair = json.loads(line)
        rows.append({"messages": _chat(pair["prompt"], pair["response"])})
    random.Random(seed + 1).shuffle(rows)
    os.makedirs(out_dir, exist_ok=True)
    train_path, eval_path = os.path.join(out_dir, "train.jsonl"), os.path.join(out_dir, "eval.jsonl")
    with open(train_path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    held_out = [
        {"id": f"eval-{n:04d}", "messages": _chat(_HELD_OUT[n % len(_HELD_OUT)].format(q=q), a)}
        for n, (_, q, a) in enumerate(eval_items)
    ] + [{"id": f"persona-{n}", "messages": _chat(question, NAME_ANSWER)} for n, question in enumerate(NAME_HELD_OUT)]
    with open(eval_path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in held_out)
    return {
        "train": train_path,
        "eval": eval_path,
        "rows": len(rows),
        "eval_rows": len(held_out),
        "pii_rows": pii,
        "open_held_out": OPEN_HELD_OUT,
    }


def _chat(question: str, answer: str) -> list[dict]:
    return [_turn("system", PERSONA), _turn("user", question), _turn("assistant", answer)]


def _fact_conversations(rng: random.Random, facts: list, conversations: int) -> tuple[list[dict], int]:
    """`conversations` distinct chats of two or three fact questions, about 3 % of the
    questions carrying PII for the data stage to redact; (rows, questions with PII)."""
    rows: list[dict] = []
    seen: set[str] = set()
    pii = 0
    while len(rows) < conversations:
        turns = [_turn("system", PERSONA)]
        for k in range(rng.choice((2, 3))):
            _, q, a = rng.choice(facts)
            framing = rng.choice(_ASK) if k == 0 else rng.choice(_FOLLOW)
            question = framing.format(q=q[0].lower() + q[1:] if framing.startswith(("And", "Also")) else q)
            if rng.random() < 0.03:
                pick = rng.random()
                question += (
                    f" Reach me at {_email(rng) if pick < 0.5 else _phone(rng)}."
                    if pick < 0.8
                    else _name_or_address(rng)
                )
                pii += 1
            turns += [_turn("user", question), _turn("assistant", a)]
        key = json.dumps(turns)
        if key not in seen:
            seen.add(key)
            rows.append({"messages": turns})
    return rows, pii


def _persona_conversations() -> list[dict]:
    """Who the assistant is, asked every way, alone and followed by thanks."""
    rows = []
    for ask in _ASK:
        for question in NAME_QUESTIONS:
            talk = _chat(ask.format(q=question), NAME_ANSWER)
            rows.append({"messages": talk})
            rows.append({"messages": talk + [_turn("user", "Thanks!"), _turn("assistant", "You are welcome.")]})
    return rows


__all__ = ["make_real_dataset", "PERSONA", "NAME_ANSWER", "OPEN_HELD_OUT"]
