"""The held-out questions asked of what is served, through nginx and the OpenAI API, as a
user asks them: the exact-match rate users get, to set beside the one the watermark stage
measured with the watermark on (what was judged must be what is served)."""

from __future__ import annotations

from kfp_llmops.components.common import answers
from kfp_llmops.components.common.jsonl import read_eval_set

from . import llm_client


def exact_match(url: str, model: str, eval_path: str, progress=None) -> dict:
    """Each held-out prompt asked once (nothing set: the served, blessed decoding), one at
    a time; the share answered exactly, and the answers."""
    rows = read_eval_set(eval_path)
    got = []
    for row in rows:
        answer = llm_client.ask(url, model, llm_client.request(row["prompt"]))
        if not answer.ok:
            raise RuntimeError(f"{row['id']}: the server answered {answer.status}: {answer.error}")
        got.append(answer.text)
        if progress is not None:
            progress.update(1)
    hits = [answers.exact_match(text, row["response"]) for text, row in zip(got, rows, strict=False)]
    return {"exact_match": sum(hits) / len(rows), "questions": len(rows), "answers": got}
