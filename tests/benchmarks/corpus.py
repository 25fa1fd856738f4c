"""Generated benchmark corpora: SFT JSONL with realistic PII and hard negatives mixed
into templated Q&A, written fast (chunks of rows joined in memory)."""

from __future__ import annotations

import json
import os
import random

from kfp_llmops.pipelines.demo.demo_data import _qa_items
from tests.pii_corpus import labeled_samples, name_samples


def write_corpus(path: str, target_bytes: int, seed: int = 0) -> dict:
    """Write SFT rows until `target_bytes`: 1 in 4 carries PII or a hard negative (a third
    of those a person name, an address or a name hard negative), 1 % are duplicates and
    0.5 % malformed."""
    if os.path.exists(path) and os.path.getsize(path) >= target_bytes:
        return {"path": path, "bytes": os.path.getsize(path)}
    rng = random.Random(seed)
    items = _qa_items()
    extras = [s.text for s in labeled_samples(4000, seed=seed)] + [s.text for s in name_samples(2000, seed=seed)]
    rows = written = 0
    tmp = f"{path}.partial"
    with open(tmp, "w", encoding="utf-8") as handle:
        while written < target_bytes:
            batch = []
            for _ in range(5000):
                _, q, a = items[rows % len(items)]
                prompt = f"{q} (request {rows})"
                if rows % 4 == 0:
                    prompt += " " + extras[rng.randrange(len(extras))]
                line = json.dumps(
                    {
                        "prompt": prompt,
                        "response": a
                        + " "
                        + rng.choice(["Hope that helps.", "Let me know if you need more.", "That is the answer."]),
                    }
                )
                roll = rng.random()
                if roll < 0.01 and batch:  # 1 % exact duplicates
                    line = batch[rng.randrange(len(batch))]
                elif roll < 0.015:  # 0.5 % malformed
                    line = line[: len(line) // 2]
                batch.append(line)
                rows += 1
            chunk = "\n".join(batch) + "\n"
            handle.write(chunk)
            written += len(chunk.encode("utf-8"))
    os.replace(tmp, path)
    return {"path": path, "bytes": os.path.getsize(path), "rows": rows}
