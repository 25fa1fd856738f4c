"""Smoke tests of the canary through the traffic split with `X-Canary: always`: server
and model ready, metadata, the OpenAI API's model list, real answers through it (streamed
and not), and the KGW watermark
detected on what the canary generated (long answers to an open-ended prompt, sampled:
what the watermark stage measured detection on; served answers stop at EOS)."""

from __future__ import annotations

import json

import numpy as np

from kfp_llmops.components.common import gates

from . import llm_client
from .config import DeployConfig

CANARY = {"X-Canary": "always"}


def _get(url: str, path: str, headers: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=10.0) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def answer(url: str, model: str, request: dict, headers: dict) -> str:
    """The answer's text; an error answer raises with the server's one line."""
    got = llm_client.ask(url, model, request, headers, timeout=120.0)
    if not got.ok:
        raise RuntimeError(f"status {got.status}: {got.error}")
    return got.text


def run(
    url: str, cfg: DeployConfig, watermark=None, tokenizer=None, headers: dict | None = None, api: str = "openai"
) -> dict:
    """One gate check (JSON) per probe; `passed` is the conjunction. Never raises for a bad
    canary. `api`: openai (answers through /v1) or triton (the generate extension only)."""
    headers = CANARY if headers is None else headers
    model = cfg.serving.model_name
    checks: list[gates.Check] = []

    def check(name: str, fn) -> object:
        try:
            value, ok, detail = fn()
        except Exception as exc:  # noqa: BLE001 - any failure of the canary is a failed check
            value, ok, detail = None, False, f"{type(exc).__name__}: {str(exc)[:200]}"
        checks.append(gates.holds(name, bool(ok), detail, value=value if isinstance(value, float) else None))
        return value

    check("server_ready", lambda: (None, _get(url, "/v2/health/ready", headers)[0] == 200, ""))
    check("model_ready", lambda: (None, _get(url, f"/v2/models/{model}/ready", headers)[0] == 200, ""))
    meta = check(
        "metadata",
        lambda: (
            m := _get(url, f"/v2/models/{model}", headers)[1],
            bool(m.get("inputs")) and bool(m.get("outputs")),
            f"versions {m.get('versions')}",
        ),
    )
    if api == "openai":
        check(
            "openai_models",
            lambda: (
                m := _get(url, "/v1/models", headers)[1],
                [d.get("id") for d in m.get("data", [])] == [model],
                f"models {[d.get('id') for d in m.get('data', [])]}",
            ),
        )
    build = llm_client.request if api == "openai" else llm_client.generate_body
    texts = []
    sm = cfg.smoke
    for i in range(sm.requests):  # long answers asked for, as the watermark stage's detection texts are
        request = build(
            sm.prompt,
            stream=i % 2 == 1,
            max_tokens=sm.max_new_tokens,
            seed=i,
            min_tokens=sm.max_new_tokens,
            temperature=sm.temperature,
        )
        text = check(
            f"inference_{i}",
            lambda r=request: (
                t := answer(url, model, r, headers),
                bool(t.strip()),
                f"{len(t)} chars{' streamed' if r.get('stream') else ''}",
            ),
        )
        if text:
            texts.append(text)
    if watermark is not None and tokenizer is not None:

        def detect():
            if not texts:
                return None, False, "no generated text"
            d = watermark.detect(np.concatenate([np.asarray(tokenizer.encode(t), dtype=np.int64) for t in texts]))
            return (
                d.z,
                bool(d.watermarked),
                f"z={d.z:.2f} over {d.tokens_scored} tokens (threshold {watermark.z_threshold})",
            )

        check("watermark", detect)
    return {"passed": gates.passed(checks), "checks": [c.to_json() for c in checks], "metadata": meta}
