"""`llmops compile`: KFP IR YAML for every pipeline, byte-deterministic, with `--check`
as the GitOps drift gate (non-zero when the committed YAML is stale)."""
from __future__ import annotations

import difflib
import os
import tempfile

from kfp import compiler

from .release import PIPELINES

COMPILED_DIR = os.path.join(os.path.dirname(__file__), "compiled")


def compile_one(name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.yaml")
        compiler.Compiler().compile(PIPELINES[name], package_path=path)
        with open(path, encoding="utf-8") as handle:
            return handle.read()


def compile_all(out_dir: str = COMPILED_DIR, check: bool = False) -> list[str]:
    """Write (or, with check, compare) each pipeline; return the names that differ."""
    stale = []
    for name in sorted(PIPELINES):
        text = compile_one(name)
        target = os.path.join(out_dir, f"{name}.yaml")
        current = open(target, encoding="utf-8").read() if os.path.exists(target) else None
        if current == text:
            continue
        stale.append(name)
        if check:
            diff = difflib.unified_diff((current or "").splitlines(), text.splitlines(),
                                        f"committed/{name}.yaml", f"compiled/{name}.yaml", lineterm="", n=1)
            print("\n".join(list(diff)[:40]))
        else:
            os.makedirs(out_dir, exist_ok=True)
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
    return stale
