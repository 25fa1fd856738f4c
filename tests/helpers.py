import json
import os

from kfp_llmops.components.data_validation import run_to_dir


def write_lines(path, lines):
    with open(path, "wb") as handle:
        for line in lines:
            handle.write((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n")
    return str(path)


def validate_lines(tmp_path, lines, **kwargs):
    src = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out"
    result = run_to_dir(src, str(out), show_progress=False, **kwargs)
    return result, out


def read_jsonl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def sft(i, prompt=None, response=None):
    return {"prompt": prompt or f"Question number {i}?", "response": response or f"Answer number {i}."}


__all__ = ["write_lines", "validate_lines", "read_jsonl", "sft", "os"]
