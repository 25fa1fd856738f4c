"""Each stage notes its input and output roots in a release folder (a PVC on a cluster,
a local folder in kfp.local): the exit handler's release record is built from these
notes, and `llmops lineage verify` walks them."""
from __future__ import annotations

import json
import os


def note(release_dir: str | None, stage: str, entry: dict) -> None:
    """Write `<release_dir>/stages/<stage>.json` atomically; no-op without a release folder."""
    if not release_dir:
        return
    folder = os.path.join(release_dir, "stages")
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{stage}.json.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"stage": stage, **entry}, handle, indent=2, sort_keys=True, default=str)
    os.replace(tmp, os.path.join(folder, f"{stage}.json"))


def read_notes(release_dir: str) -> dict[str, dict]:
    folder = os.path.join(release_dir, "stages")
    out = {}
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json") and not name.startswith("."):
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    out[name[:-5]] = json.load(handle)
    return out
