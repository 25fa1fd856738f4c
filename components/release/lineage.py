"""`llmops lineage verify RECORD`: walk dataset root -> checkpoint chain -> model root ->
blessing -> deployed repository root, re-hashing every artifact still on disk, and prove
that what serves traffic descends from the validated dataset -- or name the first
broken link."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from kfp_llmops.components.common import integrity, records, signing
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


def _dataset(v: records.ValidateDataset | None, links: list[Link]) -> str | None:
    if v is None:
        links.append(Link("validated dataset", False, "no validate_dataset stage in the record"))
        return None
    clean = v.outputs.clean
    if v.result != "passed":
        links.append(Link("validated dataset", False, f"the data gate did not pass ({v.result})"))
    elif _exists(clean.path):
        good, detail = _check(
            lambda: "clean data re-hashed: " + integrity.verify("dataset", clean.path, clean.root, clean.chunk_size)
        )
        links.append(Link("validated dataset", good, detail))
    else:
        links.append(Link("validated dataset", True, f"root {clean.root} (data not on this machine)"))
    return clean.root


def _checkpoints(train: records.TrainZero3, data_root: str | None, links: list[Link]) -> None:
    ckpt = train.outputs.checkpoints
    if not _exists(ckpt.path):
        links.append(Link("checkpoint chain", True, f"final checkpoint {ckpt.root} (checkpoints not on this machine)"))
        return
    tags = [t for _, t in sorted(integrity.list_tags(ckpt.path))]  # oldest first
    prev, problems = None, []
    for tag in tags:
        tag_dir = os.path.join(ckpt.path, tag)
        report = integrity.verify_checkpoint(tag_dir)
        _, stated = integrity.load_checkpoint(tag_dir)
        meta = stated.get("meta") or {}
        if not report.ok:
            problems.append(f"{tag}: {report.summary()}")
        if meta.get("dataset_root") != data_root:
            problems.append(f"{tag}: trained on dataset {meta.get('dataset_root')}, not {data_root}")
        if prev is not None and meta.get("previous_root") != prev:
            problems.append(f"{tag}: previous_root {meta.get('previous_root')} does not chain to {prev}")
        prev = stated["root"]
    if tags and prev != ckpt.root:
        problems.append(f"newest checkpoint {prev} is not the recorded {ckpt.root}")
    links.append(
        Link(
            "checkpoint chain",
            not problems and bool(tags),
            "; ".join(problems)
            if problems
            else f"{len(tags)} checkpoints intact and chained"
            if tags
            else "no checkpoints found",
        )
    )


def _stages(record: dict) -> dict[str, records.StageRecord]:
    stages = record.get("stages") or {}
    return {name: records.parse(data, f"release record stages.{name}") for name, data in stages.items()}


def _signature(what: str, folder: str, stated: str | None, public_key: str | None, links: list[Link]) -> None:
    """With a public key, the folder's model-signing signature verifies and states the
    digest the record (and so the attestation's subject) names."""
    if not public_key:
        return

    def check():
        digest = signing.verify_folder(folder, public_key)["digest"]
        if stated and digest != stated:
            raise InputError(f"{folder}: signed digest {digest} is not the recorded {stated}")
        return f"signature verifies with {os.path.basename(public_key)} (sha256 {digest[:16]}…)"

    links.append(Link(f"{what} signature", *_check(check)))


def _served(state: records.Artifact, repo: records.RepositoryOut, public_key: str | None, links: list[Link]) -> None:
    """The bytes the stable server loads, re-hashed: not the state file's word for them."""
    serving = (records.read_serving_state(state.path).get("stable") or {}).get("repository_root")
    links.append(
        Link(
            "serving now",
            serving == repo.root,
            f"stable serves {serving}" + ("" if serving == repo.root else ", a later release or a rollback"),
        )
    )
    stable = records.served_dir(state.path)  # a str whenever `serving` names a root
    if serving and os.path.isdir(stable):
        links.append(
            Link(
                "served bytes",
                *_check(lambda: "the stable folder re-hashed: " + integrity.verify("repository", stable, serving)),
            )
        )
        _signature("served", stable, repo.signed_sha256 if serving == repo.root else None, public_key, links)
    elif serving:
        links.append(Link("served bytes", False, f"{stable}: the stable repository is missing"))


def _stored(uri: str, root: str | None) -> Link:
    """A cluster's served copy in object storage, re-hashed through its manifest."""
    from kfp_llmops.components.common import storage

    try:
        storage.verify_stored(uri, root)
    except storage.Unreachable as exc:
        return Link("served bytes", True, f"stored copy not reachable from here ({exc})")
    except LlmopsError as exc:
        return Link("served bytes", False, str(exc))
    return Link("served bytes", True, f"the stored copy at {uri} re-hashed: {root}")


def verify(record: dict, public_key: str | None = None) -> tuple[bool, list[Link]]:
    """Walk the chain; with `public_key`, the model's and repository's signatures too."""
    stages = _stages(record)
    links: list[Link] = [Link("attestation", True, record["attestation"])] if record.get("attestation") else []
    data_root = _dataset(stages.get("validate_dataset"), links)
    train = stages.get("train_zero3")
    if not train:
        links.append(Link("dataset -> training", False, "no train_zero3 stage in the record"))
        return False, links
    ok = train.inputs.dataset_root == data_root and data_root is not None
    links.append(
        Link(
            "dataset -> training",
            ok,
            f"trained on {train.inputs.dataset_root}" + ("" if ok else f", validated {data_root}"),
        )
    )
    base = stages.get("build_base_model")
    if base:
        ok = train.inputs.base_model_root == base.outputs.base_model.root
        links.append(Link("base model -> training", ok, f"base model {train.inputs.base_model_root}"))
    _checkpoints(train, data_root, links)
    model = train.outputs.model
    ok = model.checkpoint_root == train.outputs.checkpoints.root
    links.append(Link("checkpoint -> model", ok, f"model exported from checkpoint {model.checkpoint_root}"))
    if _exists(model.path):
        good, detail = _check(lambda: "model folder re-hashed: " + integrity.verify("model", model.path, model.root))
        links.append(Link("model", good, detail))
        _signature("model", model.path, model.signed_sha256, public_key, links)
    ev = stages.get("evaluate_llm")
    if not ev:
        links.append(Link("model -> blessing", False, "no evaluate_llm stage in the record"))
        return False, links
    ok = ev.inputs.model_root == model.root and ev.result == "blessed"
    links.append(Link("model -> blessing", ok, f"{ev.result} model {ev.inputs.model_root}"))
    wm = stages.get("verify_watermark")
    if wm:
        ok = wm.inputs.model_root == model.root and wm.result == "verified"
        links.append(Link("model -> watermark", ok, f"{wm.result} on model {wm.inputs.model_root}"))
    dep = stages.get("triton_canary_deploy")
    if not dep:
        links.append(Link("blessing -> deployment", False, "nothing was deployed in this release"))
        return False, links
    repo = dep.outputs.repository
    ok = dep.inputs.model_root == model.root and dep.inputs.blessed_root == model.root
    links.append(Link("blessing -> deployment", ok, f"repository {repo.root} holds model {dep.inputs.model_root}"))
    if _exists(repo.path):
        links.append(Link("deployed repository", *_check(lambda: _repository(repo, model.root))))
        _signature("repository", repo.path, repo.signed_sha256, public_key, links)
    links.append(Link("serving", dep.result == "promoted", f"decision {dep.result}"))
    state = dep.outputs.serving_state
    if _exists(state.path):
        _served(state, repo, public_key, links)
    elif dep.outputs.served_uri:
        links.append(_stored(dep.outputs.served_uri, repo.root))
    return all(link.ok for link in links), links


def _repository(repo: records.RepositoryOut, model_root: str | None) -> str:
    """The repository re-verified, and the weights inside it re-verified as the model."""
    root = integrity.verify("repository", repo.path, repo.root)
    if not repo.weights:
        raise InputError(f"{repo.path}: the record does not say where the weights are")
    integrity.verify("model", os.path.join(repo.path, repo.weights), model_root)
    return f"repository re-verified: root {root}, weights are model {model_root}"


def load_record(path: str, public_key: str | None = None) -> dict:
    """A release record, or the one inside a signed provenance attestation after its
    signature, schema, digest and subjects check out."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable release record: {exc}") from None
    if isinstance(record, dict) and ("payloadType" in record or "_type" in record):
        from .provenance import open_attestation

        stmt, record = open_attestation(path, public_key)
        record["attestation"] = f"signed by {signing.key_id(public_key)[:16]}…, subjects " + ", ".join(
            s["name"] for s in stmt["subject"]
        )
        return record
    if record.get("format") != "kfp-llmops-release/1":
        raise InputError(f"{path}: not a kfp-llmops release record (format {record.get('format')!r})")
    return record
