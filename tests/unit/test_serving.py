"""What the server does with a request before and while it answers: the request read and
checked (text or chat, decoding within the bound, one-line errors that never quote the
prompt), the answer streamed piece by piece with multi-byte characters and stop strings
intact, and the generation routine's token hook, which must not change what is chosen."""

import json

import pytest

from kfp_llmops.components.common.decoding import Decoding
from kfp_llmops.components.common.detokenize import TextStream, answer_text
from kfp_llmops.components.common.generation import generate, load_model
from kfp_llmops.components.deploy.serving_request import check_fits, parse
from tests.byo_models import save_model, tokenizer

BLESSED = Decoding()  # greedy, 24 new tokens


def _stream(tok, ids, stop=""):
    stream = TextStream(tok, stop)
    pieces = []
    for t in ids:
        pieces.append(stream.push(t))
        if stream.stopped:
            break
    pieces.append(stream.finish())
    return stream, [p for p in pieces if p]


def test_streamed_pieces_join_to_the_answer_and_never_split_a_character():
    tok = tokenizer(2000)
    text = "  Café → 日本語 🎉 ok, naïve façade.  "
    ids = tok.encode(text)
    assert any("\ufffd" in tok.decode([t]) for t in ids)  # the tokenizer does split characters over tokens
    stream, pieces = _stream(tok, ids)
    assert "".join(pieces) == answer_text(tok, ids) == text.strip()
    assert not any("\ufffd" in p for p in pieces) and len(pieces) > 5 and not stream.diverged


def test_a_stop_string_ends_the_stream_and_is_never_sent_in_part():
    tok = tokenizer(2000)
    ids = tok.encode("The answer is 42.\nQ: and the next question")
    stream, pieces = _stream(tok, ids, stop="\nQ:")
    assert stream.stopped and "".join(pieces) == "The answer is 42." == answer_text(tok, ids, "\nQ:")
    assert len(stream.tokens) < len(ids)  # the tokens after the stop were never asked for
    _, pieces = _stream(tok, tok.encode("Ends with half a stop \nQ"), stop="\nQ:")
    assert "".join(pieces) == "Ends with half a stop \nQ".strip()  # held back, then sent: it never became the stop
    ids = tok.encode("12 meX and more")  # a space before the start of the stop string is not sent either
    stream, pieces = _stream(tok, ids, stop="meX and")
    assert "".join(pieces) == "12" == answer_text(tok, ids, "meX and") and not stream.diverged


def test_several_stop_strings_end_the_answer_at_the_first_that_occurs():
    tok = tokenizer(2000)
    text = "Alpha beta. Gamma; delta\nQ: more"
    ids = tok.encode(text)
    for stops, want in (
        (["\nQ:", ";", "never"], "Alpha beta. Gamma"),  # the first in the text, not in the list
        (("never", "beta."), "Alpha"),
        (["never", "either"], text.strip()),
        (["beta. Gamma", "a. G"], "Alpha bet"),  # complete first as generated, though it starts later
    ):
        stream, pieces = _stream(tok, ids, stop=stops)
        assert "".join(pieces) == want == answer_text(tok, ids, stops), stops
        assert stream.stopped == (want != text.strip()) and not stream.diverged
    # a tail that may start either of two stops is held back until it cannot
    stream = TextStream(tok, ["Gamma; x", "Gam!"])
    sent = "".join(stream.push(t) for t in tok.encode("Alpha beta. Gam"))
    assert sent == "Alpha beta." and not stream.stopped


def test_stop_strings_are_read_from_stop_and_stops():
    got = parse({"text_input": "Hi", "stop": "\n", "stops": json.dumps(["Q:", "\n", "A:"])}, BLESSED, 256)
    assert got.stops == ("\n", "Q:", "A:")
    assert parse({"text_input": "Hi"}, BLESSED, 256).stops == ()
    for stops, says in (
        ("[1]", "non-empty strings"),
        ("Q:", "not a JSON list"),
        (json.dumps(["a", "b", "c", "d", "e"]), "at most 4"),
        (json.dumps(["x" * 257]), "longer than 256"),
    ):
        with pytest.raises(ValueError, match=says) as caught:
            parse({"text_input": "secret prompt", "stops": stops}, BLESSED, 256)
        assert str(caught.value).startswith("stops: ") and "secret" not in str(caught.value)


def test_requests_are_read_within_the_blessed_decoding_and_bad_ones_named_in_one_line():
    got = parse({"text_input": "Hi"}, BLESSED, 256)
    assert got.prompt == "Hi" and got.decoding == BLESSED and not got.stream and got.seed == 0
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    got = parse({"messages": json.dumps(chat), "temperature": 0.7, "seed": 5, "stream": True}, BLESSED, 256)
    assert got.prompt == chat and got.decoding.do_sample and got.seed == 5 and got.stream
    assert parse({"text_input": "x", "seed": 5}, BLESSED, 256).seed == 0  # greedy: one batch for all seeds
    secret = "my card is 4111 1111 1111 1111"
    bad = {
        "text_input or messages: give exactly one": {},
        "messages: not a JSON list of turns": {"messages": "[{"},
        "messages[0].role: unknown role 'robot'": {"messages": json.dumps([{"role": "robot", "content": secret}])},
        "messages[1].role: the conversation ends with a assistant turn": {
            "messages": json.dumps([{"role": "user", "content": secret}, {"role": "assistant", "content": "ok"}])
        },
        "messages: expected a list of turns": {"messages": json.dumps({"role": "user"})},
        "max_new_tokens: Input should be greater than or equal to 1": {"text_input": secret, "max_new_tokens": 0},
        "max_new_tokens: 300 is above the server's bound 256": {"text_input": secret, "max_new_tokens": 300},
        "temperature: Input should be greater than or equal to 0.01": {"text_input": secret, "temperature": 0.0},
        "temperature: Input should be greater than or equal to 0.01 (got 1e-30)": {
            "text_input": secret,
            "temperature": 1e-30,
        },
        "top_p: Input should be less than or equal to 1": {"text_input": secret, "top_p": 1.5},
        "min_new_tokens: 30 is outside 0..max_new_tokens (24)": {"text_input": secret, "min_new_tokens": 30},
    }
    for message, values in bad.items():
        with pytest.raises(ValueError) as caught:
            parse(values, BLESSED, 256)
        assert str(caught.value).startswith(message), (message, str(caught.value))
        assert "\n" not in str(caught.value) and "4111" not in str(caught.value)
    # the server's bounds, before any template or tokenizer runs
    limits = {"max_turns": 3, "max_prompt_chars": 40}
    long_chat = [{"role": "user", "content": secret}, {"role": "assistant", "content": "ok"}] * 2
    too_long = {
        "messages: 5 turns; this server takes at most 3": {"messages": json.dumps([*long_chat, long_chat[0]])},
        "messages: 62 characters; this server takes at most 40": {"messages": json.dumps(long_chat[:3])},
        "text_input: 41 characters; this server takes at most 40": {"text_input": secret + "x" * 11},
    }
    for message, values in too_long.items():
        with pytest.raises(ValueError) as caught:
            parse(values, BLESSED, 256, limits)
        assert str(caught.value) == message and "4111" not in str(caught.value)
    assert parse({"messages": json.dumps(long_chat[:1])}, BLESSED, 256, limits).prompt == long_chat[:1]
    with pytest.raises(ValueError, match="^prompt: 2040 tokens and max_new_tokens 24 exceed the model.s context"):
        check_fits(2040, 24, 2048)
    check_fits(2024, 24, 2048)


def test_the_token_hook_sees_each_token_as_chosen_and_ends_only_the_rows_it_stops(tmp_path):
    model, tok = load_model(save_model(str(tmp_path / "m"), "llama", vocab=2000))
    prompts = ["What is a canary?", "Name a prime.", "Hello"]
    plain = generate(model, tok, prompts, max_new_tokens=12, batch_size=3, seed=0, do_sample=False)
    seen = {i: [] for i in range(3)}

    def watch(i, token):
        if token is not None:
            seen[i].append(token)
        return i == 1 and len(seen[1]) == 4  # a stop string or a client gone, on row 1 only

    hooked = generate(model, tok, prompts, max_new_tokens=12, batch_size=3, seed=0, do_sample=False, on_token=watch)
    assert [c.tokens for c in hooked][0::2] == [c.tokens for c in plain][0::2]  # other rows unchanged
    assert hooked[1].tokens == plain[1].tokens[:4] and not hooked[1].ended
    assert seen[0] == plain[0].tokens and seen[2] == plain[2].tokens
