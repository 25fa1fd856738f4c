"""OpenAI request bodies read into the served model's inputs, and its answers written back
in OpenAI's shapes: what a client sets is passed on under the served input's name, what
it leaves out stays the blessed decoding's, and a bad field is a 400 naming it."""

import json

import pytest

from kfp_llmops.components.deploy import openai_api
from kfp_llmops.components.deploy.serving_request import INPUTS

CHAT = [{"role": "user", "content": "Hello there"}]


def _inputs(**body) -> dict:
    chat = "prompt" not in body
    return openai_api.translate({"model": "llm", **({"messages": CHAT} if chat else {}), **body}, chat, "llm").inputs


def test_a_request_that_sets_nothing_leaves_the_decoding_to_the_server():
    assert _inputs() == {"messages": json.dumps(CHAT)}
    assert _inputs(prompt="Hi") == {"text_input": "Hi"}
    assert _inputs(prompt=["Hi"]) == {"text_input": "Hi"}


def test_fields_map_to_the_served_inputs():
    got = _inputs(max_tokens=12, temperature=0.7, top_p=0.9, seed=3, stop=["\n"], min_tokens=2)
    assert got == {
        "messages": json.dumps(CHAT),
        "max_new_tokens": 12,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 3,
        "stop": "\n",
        "min_new_tokens": 2,
    }
    assert set(got) <= set(INPUTS)
    assert _inputs(temperature=0)["do_sample"] is False  # greedy, whatever the blessed decoding samples with
    assert _inputs(max_completion_tokens=5)["max_new_tokens"] == 5
    assert _inputs(max_tokens=9, ignore_eos=True)["min_new_tokens"] == 9
    several = _inputs(stop=["\n\n", "Q:", "\u00bfQ"])  # several stops travel as one JSON list
    assert several["stops"] == json.dumps(["\n\n", "Q:", "\u00bfQ"]) and "stop" not in several
    assert _inputs(stop="\n") == {"messages": json.dumps(CHAT), "stop": "\n"}


def test_newer_clients_message_shapes_are_read():
    body = {
        "model": "llm",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
        ],
    }
    turns = json.loads(openai_api.translate(body, True, "llm").inputs["messages"])
    assert turns == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


@pytest.mark.parametrize(
    "body,status,param,says",
    [
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role", "unknown role 'robot'"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages[0].content[0]", "text"),
        ({"messages": "hi"}, 400, "messages", "expected a list"),
        ({"max_tokens": 0}, 400, "max_tokens", "outside 1"),
        ({"max_tokens": True}, 400, "max_tokens", "expected an integer"),
        ({"temperature": 3}, 400, "temperature", "outside 0.0..2.0"),
        ({"temperature": 0.001}, 400, "temperature", "below 0.01"),
        ({"top_p": 0}, 400, "top_p", "keeps no token"),
        ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "5 stop strings; at most 4"),
        ({"stop": ["a", ""]}, 400, "stop", "non-empty string"),
        ({"stop": "x" * 257}, 400, "stop", "longer than 256"),
        ({"n": 3}, 400, "n", "outside 1..1"),
        ({"ignore_eos": True}, 400, "ignore_eos", "needs max_tokens"),
        ({"logprobs": True}, 400, "logprobs", "not supported"),
        ({"stream_options": {"continuous": True}}, 400, "stream_options", "include_usage"),
        ({"tools": []}, 400, "tools", "unrecognized"),
        ({"model": "gpt-4"}, 404, "model", "not served here"),
    ],
)
def test_a_bad_field_is_named_and_the_prompt_never_quoted(body, status, param, says):
    full = {"model": "llm", "messages": [{"role": "user", "content": "my secret"}], **body}
    with pytest.raises(openai_api.ApiError) as caught:
        openai_api.translate(full, True, "llm")
    err = caught.value
    assert (err.status, err.param) == (status, param) and says in err.message, err.body()
    assert "secret" not in err.message and err.body()["error"]["type"] == "invalid_request_error"


def test_answers_are_written_in_openais_shapes():
    t = openai_api.translate({"model": "llm", "messages": CHAT, "stream": True}, True, "llm")
    final = {"finish_reason": "length", "prompt_tokens": 7, "completion_tokens": 3}
    whole = openai_api.response(t, "Hi!", final)
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Hi!",
    }
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    first = openai_api.chunk(t, "Hi", first=True)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"} and "usage" not in first
    last = openai_api.chunk(t, None, final)
    assert last["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    c = openai_api.translate({"model": "llm", "prompt": "Hi", "stream_options": {"include_usage": True}}, False, "llm")
    assert openai_api.chunk(c, "Hi")["object"] == "text_completion" and openai_api.chunk(c, "Hi")["usage"] is None
    assert openai_api.usage_chunk(c, final)["choices"] == [] and openai_api.usage_chunk(c, final)["usage"]
    assert openai_api.models("llm", 1)["data"][0]["id"] == "llm"
