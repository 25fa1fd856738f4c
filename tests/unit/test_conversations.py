"""Conversational SFT data (messages; prompt/completion) through validation, training's
encoding and the eval set: turns checked, PII redacted inside each turn, loss on the
assistant's turns only, the prompt being the conversation up to the last assistant turn."""

import json

import numpy as np
import pytest

from kfp_llmops.components.common import generation
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.jsonl import read_eval_set
from tests.byo_models import tokenizer
from tests.helpers import read_jsonl, validate_lines, write_lines

NAMES_OFF = "pii: {names: {enabled: false}}\n"


def chat(*turns):
    return {"messages": [{"role": r, "content": c} for r, c in turns]}


def test_conversations_are_validated_turn_by_turn_and_pii_is_redacted_inside_turns(tmp_path):
    rows = [
        chat(
            ("system", "You are terse."),
            ("user", "Mail me at jane.roe@example.com please."),
            ("assistant", "Noted."),
            ("user", "And call +1 415 555 0100."),
            ("assistant", "Will do."),
        ),
        chat(("user", "Hi"), ("robot", "beep")),  # unknown role
        chat(("user", "Hi"), ("assistant", "   ")),  # empty turn
        chat(("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")),  # ends with the user
        {"messages": "user: hi"},  # not a list
        {"prompt": "What is 2 + 2?", "completion": "4."},  # TRL prompt-completion
        chat(("user", "Hi"), ("system", "late system"), ("assistant", "Hello.")),
    ]
    result, out = validate_lines(tmp_path, rows, config_source=NAMES_OFF)
    clean = read_jsonl(out / "clean.jsonl")
    quarantined = {q["line"]: (q["reason"], q["field"]) for q in read_jsonl(out / "quarantine.jsonl")}
    assert quarantined == {
        2: ("unknown_role", "messages[1].role"),
        3: ("empty_turn", "messages[1].content"),
        4: ("no_assistant_turn", "messages[2].role"),
        5: ("wrong_type", "messages"),
        7: ("bad_turn", "messages[1].role"),
    }
    first = clean[0]["messages"]
    assert [t["role"] for t in first] == ["system", "user", "assistant", "user", "assistant"]
    assert first[1]["content"] == "Mail me at [EMAIL] please." and first[3]["content"] == "And call [PHONE]."
    assert clean[1] == {"prompt": "What is 2 + 2?", "completion": "4."}
    assert result.metrics["rows_in"] == 7 == result.metrics["rows_out"] + result.metrics["rows_quarantined"]


def test_dedup_compares_the_rendered_conversation(tmp_path):
    a = chat(("user", "Is it raining?"), ("assistant", "Yes it is."))
    same = chat(("user", "  is it   RAINING? "), ("assistant", "yes it is."))  # normalized: a duplicate
    swapped = chat(("assistant", "Is it raining?"), ("user", "Yes it is."), ("assistant", "Ok."))
    _, out = validate_lines(tmp_path, [a, same, swapped], config_source=NAMES_OFF)
    assert [(q["line"], q["reason"]) for q in read_jsonl(out / "quarantine.jsonl")] == [(2, "duplicate")]


def test_the_loss_is_on_the_assistant_turns_of_a_three_turn_conversation():
    from kfp_llmops.components.training.data import encode

    tok = tokenizer(2000)
    turns = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome."},
    ]
    ids, answer = generation.encode_turns(tok, turns)
    assert tok.decode(ids) == tok.apply_chat_template(turns, tokenize=False).rstrip()
    batch = encode(tok, [turns], 96, mask_prompt=True)
    labels = batch["labels"][0]
    trained = [int(t) for t in labels if t != -100]
    assert tok.decode(trained) == "Paris.<|im_end|>Rome.<|im_end|>"  # both answers, nothing else
    spans = np.flatnonzero(np.diff(np.r_[0, (labels != -100).astype(int), 0]))
    assert len(spans) == 4  # two separate answer spans
    # generation sees exactly what training put before the last answer
    head = generation.prompt_ids(tok, turns[:-1])
    assert ids[: len(head)] == head and not any(answer[: len(head)][-3:])
    assert generation.encode_example(tok, turns[:-1], "Rome.")[0] == head


def test_prompt_and_response_pairs_encode_as_a_two_turn_conversation():
    tok = tokenizer(2000)
    head, answer = generation.encode_example(tok, "Capital of France?", "Paris.")
    ids, mask = generation.encode_turns(
        tok, [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}]
    )
    assert ids == head + answer and mask == [False] * len(head) + [True] * len(answer)


def test_training_and_eval_refuse_a_bad_conversation_naming_file_and_line(tmp_path):
    from kfp_llmops.components.training.data import read_examples

    path = write_lines(
        tmp_path / "clean.jsonl",
        [chat(("user", "Hi"), ("assistant", "Hello.")), chat(("user", "Hi"), ("narrator", "Once..."))],
    )
    with pytest.raises(InputError, match=r"clean\.jsonl:2: messages\[1\]\.role: unknown role 'narrator'"):
        read_examples(path)
    with pytest.raises(InputError, match=r"clean\.jsonl:2: messages\[1\]\.role"):
        read_eval_set(path)


def test_the_eval_prompt_is_the_conversation_up_to_its_last_assistant_turn(tmp_path):
    turns = chat(
        ("system", "Be brief."),
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And of Italy?"),
        ("assistant", "Rome."),
    )
    path = write_lines(
        tmp_path / "eval.jsonl",
        [dict(turns, id="c1"), {"prompt": "2 + 2?", "completion": "4."}, chat(("user", "Hi"), ("assistant", "Hello."))],
    )
    rows = read_eval_set(path)
    assert rows[0] == {"id": "c1", "prompt": turns["messages"][:-1], "response": "Rome."}
    assert rows[1]["prompt"] == "2 + 2?" and rows[1]["response"] == "4."
    assert rows[2]["prompt"] == "Hi"  # one user turn is prompted as its text
    json.dumps(rows)  # responses.jsonl carries the prompt as it is
