"""Smoke tests of the canary through the traffic split with `X-Canary: always`, using
tritonclient: server and model ready, metadata, real inferences, and the KGW watermark
detected on what the canary generated (long answers to an open-ended prompt, sampled:
what the watermark stage measured detection on; served answers stop at EOS)."""
from __future__ import annotations

import numpy as np

from kfp_llmops.components.common import gates

from .config import DeployConfig

CANARY = {"X-Canary": "always"}


def client(url: str):
    import tritonclient.http as httpclient
    return httpclient.InferenceServerClient(url=url.removeprefix("http://"), network_timeout=60.0,
                                            connection_timeout=10.0)


def generate(cli, model: str, prompt: str, max_new_tokens: int, seed: int, headers: dict,
             min_new_tokens: int = 0, temperature: float | None = None) -> str:
    """One request; unset sampling inputs leave the served (blessed) decoding in charge."""
    import tritonclient.http as httpclient

    values = {"text_input": ("BYTES", np.array([[prompt.encode()]], dtype=object)),
              "max_new_tokens": ("INT32", np.array([[max_new_tokens]], dtype=np.int32)),
              "seed": ("INT64", np.array([[seed]], dtype=np.int64))}
    if min_new_tokens:
        values["min_new_tokens"] = ("INT32", np.array([[min_new_tokens]], dtype=np.int32))
    if temperature is not None:
        values["temperature"] = ("FP32", np.array([[temperature]], dtype=np.float32))
    inputs = []
    for name, (datatype, array) in values.items():
        inputs.append(httpclient.InferInput(name, [1, 1], datatype))
        inputs[-1].set_data_from_numpy(array)
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
        sm = cfg.smoke
        for i in range(sm.requests):      # long answers asked for, as the watermark stage's detection texts are
            text = check(f"inference_{i}", lambda i=i: (t := generate(cli, model, sm.prompt, sm.max_new_tokens, i, headers,
                                                                      sm.max_new_tokens, sm.temperature),
                                                        bool(t.strip()), f"{len(t)} chars"))
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
