"""Is the canary a drop-in replacement for stable? Compares the served model metadata and
config (input/output names, datatypes, shapes, optional inputs) of both servers."""

from __future__ import annotations


def _tensors(metadata: dict, config: dict, kind: str) -> dict[str, dict]:
    optional = {t["name"]: bool(t.get("optional", False)) for t in config.get(kind[:-1], [])}  # "input"/"output"
    return {
        t["name"]: {"datatype": t["datatype"], "shape": list(t["shape"]), "optional": optional.get(t["name"], False)}
        for t in metadata.get(kind, [])
    }


def compare(stable_meta: dict, stable_config: dict, canary_meta: dict, canary_config: dict) -> list[dict]:
    """Differences, each `{"what", "breaking"}`; an empty list means identical interfaces."""
    diffs = []
    for kind in ("inputs", "outputs"):
        old, new = _tensors(stable_meta, stable_config, kind), _tensors(canary_meta, canary_config, kind)
        for name, spec in old.items():
            if name not in new:
                diffs.append({"what": f"{kind[:-1]} {name!r} removed", "breaking": True})
                continue
            for attr in ("datatype", "shape"):
                if spec[attr] != new[name][attr]:
                    diffs.append(
                        {"what": f"{kind[:-1]} {name!r} {attr} {spec[attr]} -> {new[name][attr]}", "breaking": True}
                    )
            if kind == "inputs" and spec["optional"] and not new[name]["optional"]:
                diffs.append({"what": f"input {name!r} became required", "breaking": True})
        for name, spec in new.items():
            if name not in old:
                breaking = kind == "inputs" and not spec["optional"]
                diffs.append(
                    {"what": f"{kind[:-1]} {name!r} added{' (required)' if breaking else ''}", "breaking": breaking}
                )
    was, now = (bool(c.get("model_transaction_policy", {}).get("decoupled")) for c in (stable_config, canary_config))
    if was != now:  # Triton's /infer refuses decoupled models; generate_stream needs one to stream
        diffs.append(
            {
                "what": f"decoupled {was} -> {now} (clients of {'/infer' if now else 'generate_stream'} break)",
                "breaking": True,
            }
        )
    if stable_config.get("max_batch_size", 0) > 0 and canary_config.get("max_batch_size", 0) == 0:
        diffs.append({"what": "batching removed (max_batch_size 0)", "breaking": True})
    return diffs
