"""Smoke tests of the canary through the traffic split with `X-Canary: always`, using
tritonclient: server and model ready, metadata, real inferences, and the KGW watermark
detected on what the canary generated."""
from __future__ import annotations

import numpy as np

from kfp_llmops.components.common import gates

from .config import DeployConfig

CANARY = {"X-Canary": "always"}


def client(url: str):
    import tritonclient.http as httpclient
    return httpclient.InferenceServerClient(url=url.removeprefix("http://"), network_timeout=60.0,
                                            connection_timeout=10.0)


def generate(cli, model: str, prompt: str, max_new_tokens: int, seed: int, headers: dict) -> str:
    import tritonclient.http as httpclient

    inputs = [httpclient.InferInput("text_input", [1, 1], "BYTES"),
              httpclient.InferInput("max_new_tokens", [1, 1], "INT32"),
              httpclient.InferInput("seed", [1, 1], "INT64")]
    inputs[0].set_data_from_numpy(np.array([[prompt.encode()]], dtype=object))
    inputs[1].set_data_from_numpy(np.array([[max_new_tokens]], dtype=np.int32))
    inputs[2].set_data_from_numpy(np.array([[seed]], dtype=np.int64))
    result = cli.infer(model, inputs, headers=headers)
    return result.as_numpy("text_output").reshape(-1)[0].decode("utf-8", "replace")


def run(url: str, cfg: DeployConfig, watermark=None, tokenizer=None, headers: dict | None = None) -> dict:
    """One gate check (JSON) per probe; `passed` is the conjunction. Never raises for a bad canary."""
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

    cli = client(url)
    try:
        check("server_ready", lambda: (None, cli.is_server_ready(headers=headers), ""))
        check("model_ready", lambda: (None, cli.is_model_ready(model, headers=headers), ""))
        meta = check("metadata", lambda: (m := cli.get_model_metadata(model, headers=headers),
                                          bool(m.get("inputs")) and bool(m.get("outputs")), f"versions {m.get('versions')}"))
        texts = []
        for i in range(cfg.smoke.requests):
            text = check(f"inference_{i}", lambda i=i: (t := generate(cli, model, cfg.smoke.prompt, cfg.smoke.max_new_tokens,
                                                                      i, headers), bool(t.strip()), f"{len(t)} chars"))
            if text:
                texts.append(text)
        if watermark is not None and tokenizer is not None:
            def detect():
                if not texts:
                    return None, False, "no generated text"
                d = watermark.detect(np.concatenate([np.asarray(tokenizer.encode(t), dtype=np.int64) for t in texts]))
                return d.z, bool(d.watermarked), f"z={d.z:.2f} over {d.tokens_scored} tokens (threshold {watermark.z_threshold})"
            check("watermark", detect)
    finally:
        cli.close()
    return {"passed": gates.passed(checks), "checks": [c.to_json() for c in checks], "metadata": meta}
