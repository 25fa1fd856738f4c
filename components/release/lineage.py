"""`llmops lineage verify RECORD`: walk dataset root -> checkpoint chain -> model root ->
blessing -> deployed repository root, re-hashing every artifact still on disk, and prove
that what serves traffic descends from the validated dataset -- or name the first
broken link."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from kfp_llmops.components.common.errors import InputError, LlmopsError


@dataclass
class Link:
    link: str
    ok: bool
    detail: str

    def to_json(self) -> dict:
        return asdict(self)


def _exists(path) -> bool:
    return isinstance(path, str) and os.path.exists(path)


def _check(fn) -> tuple[bool, str]:
    try:
        return True, fn() or ""
    except (LlmopsError, ValueError, OSError) as exc:
        return False, str(exc)


def _dataset(stages: dict, links: list[Link]) -> str | None:
    v = stages.get("validate_dataset")
    if not v:
        links.append(Link("validated dataset", False, "no validate_dataset stage in the record"))
        return None
    clean = v["outputs"]["clean"]
    if v.get("result") != "passed":
        links.append(Link("validated dataset", False, f"the data gate did not pass ({v.get('result')})"))
    elif _exists(clean.get("path")):
        from kfp_llmops.components.training.data import dataset_root
        found = dataset_root(clean["path"])
        links.append(Link("validated dataset", found == clean["root"],
                          f"clean data re-hashed: {found}" + ("" if found == clean["root"] else f" != recorded {clean['root']}")))
    else:
        links.append(Link("validated dataset", True, f"root {clean['root']} (data not on this machine)"))
    return clean["root"]


def _checkpoints(train: dict, data_root: str, links: list[Link]) -> None:
    from kfp_llmops.components.training import checkpoints as ck

    ckpt = train["outputs"].get("checkpoints", {})
    location = ckpt.get("path")
    if not _exists(location):
        links.append(Link("checkpoint chain", True, f"final checkpoint {ckpt.get('root')} (checkpoints not on this machine)"))
        return
    tags = [t for _, t in sorted(ck.list_tags(location))]          # oldest first
    prev, problems = None, []
    for tag in tags:
        tag_dir = os.path.join(location, tag)
        report = ck.verify(tag_dir)
        _, stated = ck.load(tag_dir)
        meta = stated.get("meta") or {}
        if not report.ok:
            problems.append(f"{tag}: {report.summary()}")
        if meta.get("dataset_root") != data_root:
            problems.append(f"{tag}: trained on dataset {meta.get('dataset_root')}, not {data_root}")
        if prev is not None and meta.get("previous_root") != prev:
            problems.append(f"{tag}: previous_root {meta.get('previous_root')} does not chain to {prev}")
        prev = stated["root"]
    if tags and prev != ckpt.get("root"):
        problems.append(f"newest checkpoint {prev} is not the recorded {ckpt.get('root')}")
    links.append(Link("checkpoint chain", not problems and bool(tags),
                      "; ".join(problems) if problems else f"{len(tags)} checkpoints intact and chained"
                      if tags else "no checkpoints found"))


def verify(record: dict) -> tuple[bool, list[Link]]:
    stages = record.get("stages") or {}
    links: list[Link] = []
    data_root = _dataset(stages, links)
    train = stages.get("train_zero3")
    if not train:
        links.append(Link("dataset -> training", False, "no train_zero3 stage in the record"))
        return False, links
    ok = train["inputs"].get("dataset_root") == data_root and data_root is not None
    links.append(Link("dataset -> training", ok, f"trained on {train['inputs'].get('dataset_root')}"
                      + ("" if ok else f", validated {data_root}")))
    base = stages.get("build_base_model")
    if base:
        ok = train["inputs"].get("base_model_root") == base["outputs"]["base_model"]["root"]
        links.append(Link("base model -> training", ok, f"base model {train['inputs'].get('base_model_root')}"))
    _checkpoints(train, data_root, links)
    model = train["outputs"]["model"]
    model_root = model["root"]
    ok = model.get("checkpoint_root") == train["outputs"].get("checkpoints", {}).get("root")
    links.append(Link("checkpoint -> model", ok, f"model exported from checkpoint {model.get('checkpoint_root')}"))
    if _exists(model.get("path")):
        from kfp_llmops.components.training.base_model import verify_model_dir
        good, detail = _check(lambda: "model folder re-hashed: " + verify_model_dir(model["path"], model_root))
        links.append(Link("model", good, detail))
    ev = stages.get("evaluate_llm")
    if not ev:
        links.append(Link("model -> blessing", False, "no evaluate_llm stage in the record"))
        return False, links
    ok = ev["inputs"].get("model_root") == model_root and ev.get("result") == "blessed"
    links.append(Link("model -> blessing", ok, f"{ev.get('result')} model {ev['inputs'].get('model_root')}"))
    wm = stages.get("verify_watermark")
    if wm:
        ok = wm["inputs"].get("model_root") == model_root and wm.get("result") == "verified"
        links.append(Link("model -> watermark", ok, f"{wm.get('result')} on model {wm['inputs'].get('model_root')}"))
    dep = stages.get("triton_canary_deploy")
    if not dep:
        links.append(Link("blessing -> deployment", False, "nothing was deployed in this release"))
        return False, links
    repo = dep["outputs"]["repository"]
    ok = dep["inputs"].get("model_root") == model_root and dep["inputs"].get("blessed_root") == model_root
    links.append(Link("blessing -> deployment", ok, f"repository {repo['root']} holds model {dep['inputs'].get('model_root')}"))
    if _exists(repo.get("path")):
        from kfp_llmops.components.deploy import repository
        good, detail = _check(lambda: "repository re-verified: root "
                              + repository.verify(repo["path"], model_root, repo["root"])["repository_root"])
        links.append(Link("deployed repository", good, detail))
    links.append(Link("serving", dep.get("result") == "promoted", f"decision {dep.get('result')}"))
    state = dep["outputs"].get("serving_state", {})
    if _exists(state.get("path")):
        with open(os.path.join(state["path"], "state.json"), encoding="utf-8") as handle:
            serving = (json.load(handle).get("stable") or {}).get("repository_root")
        links.append(Link("serving now", serving == repo["root"],
                          f"stable serves {serving}" + ("" if serving == repo["root"] else ", a later release or a rollback")))
    return all(link.ok for link in links), links


def load_record(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable release record: {exc}") from None
    if record.get("format") != "kfp-llmops-release/1":
        raise InputError(f"{path}: not a kfp-llmops release record (format {record.get('format')!r})")
    return record
