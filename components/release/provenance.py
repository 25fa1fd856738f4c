"""The release as an in-toto Statement with a SLSA Provenance v1 predicate, signed in a
DSSE envelope: subjects are the model and the Triton repository (the model-signing
SHA-256 of each folder when signed, and our Merkle root under `merkle-blake3`);
resolved dependencies are the dataset, the base model, the newest checkpoint, the stage
images and the compiled pipeline spec; external parameters are what each stage was
given (configs, URIs; never keys). The release record travels inside as a byproduct, so
`llmops lineage verify` walks the same chain from the signed form.

Paths in the statement are URIs (artifacts on object storage) or relative to the release
folder, never a pod's local paths. The statement is checked against the official
in-toto and SLSA protobuf schemas (unknown fields rejected) before it is signed.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os

from kfp_llmops.components.common import signing
from kfp_llmops.components.common.errors import InputError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:kfp-llmops:release-pipeline:v1"
BUILDER_ID = "urn:kfp-llmops:release-record"
MERKLE = "merkle-blake3"  # digest-set key of our Merkle roots
RECORD_MEDIA_TYPE = "application/vnd.kfp-llmops.release+json"
FILE_NAME = "provenance.intoto.json"
# KFP mounts object storage at these prefixes inside a pod (kfp.dsl artifact types).
_MOUNTS = {"/gcs/": "gs://", "/minio/": "minio://", "/s3/": "s3://"}


def portable_path(path: str | None, release_dir: str) -> str | None:
    """A pod path as the URI of the object behind it, else relative to the release folder."""
    if not path:
        return path
    for prefix, scheme in _MOUNTS.items():
        if path.startswith(prefix):
            return scheme + path[len(prefix) :]
    if "://" in path:
        return path
    return os.path.relpath(os.path.abspath(path), os.path.abspath(release_dir))


def _map_paths(value, fn):
    if isinstance(value, dict):
        return {
            k: (fn(v) if k in ("path", "release_dir") and isinstance(v, str) else _map_paths(v, fn))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_map_paths(v, fn) for v in value]
    return value


def portable_record(record: dict, release_dir: str) -> dict:
    return _map_paths(copy.deepcopy(record), lambda p: portable_path(p, release_dir))


def resolve_record(record: dict, base: str) -> dict:
    """Relative paths of a portable record made local again, against the release folder."""
    return _map_paths(
        record, lambda p: p if "://" in p or os.path.isabs(p) else os.path.normpath(os.path.join(base, p))
    )


def _digest(root: str | None, sha256: str | None = None) -> dict:
    out = {"sha256": sha256} if sha256 else {}
    if root:
        out[MERKLE] = root
    return out


def _descriptor(name: str, path: str | None, digest: dict, release_dir: str, **extra) -> dict:
    rd = {"name": name, "digest": digest, **extra}
    if path:
        rd["uri"] = portable_path(path, release_dir)
    return {k: v for k, v in rd.items() if v}


def _images() -> list[dict]:
    from kfp_llmops.components import images

    out = []
    for stage in ("base", "data", "train", "eval", "deploy"):
        ref = images.image(stage)
        digest = {"sha256": ref.split("@sha256:")[1]} if "@sha256:" in ref else {}
        out.append(
            {
                k: v
                for k, v in {"name": f"image:{stage}", "uri": f"oci://{ref.split('@')[0]}", "digest": digest}.items()
                if v
            }
        )
    return out


def _subjects(stages: dict, release_dir: str) -> list[dict]:
    """What the release made: the trained model and the Triton repository built from it."""
    model = ((stages.get("train_zero3") or {}).get("outputs") or {}).get("model") or {}
    deploy = stages.get("triton_canary_deploy") or {}
    repo = (deploy.get("outputs") or {}).get("repository") or {}
    subjects = []
    if model.get("root"):
        subjects.append(
            _descriptor("model", model.get("path"), _digest(model["root"], model.get("signed_sha256")), release_dir)
        )
    if repo.get("root"):
        subjects.append(
            _descriptor(
                f"triton-repository/v{repo.get('version')}",
                repo.get("path"),
                _digest(repo["root"], repo.get("signed_sha256")),
                release_dir,
            )
        )
    return subjects


def _dependencies(stages: dict, release_dir: str) -> list[dict]:
    """What it was made from, where the record has a digest for it: the clean data, the
    base model, the checkpoint."""
    train = stages.get("train_zero3") or {}
    clean = ((stages.get("validate_dataset") or {}).get("outputs") or {}).get("clean") or {}
    base = ((stages.get("build_base_model") or {}).get("outputs") or {}).get("base_model") or {}
    base_root = base.get("root") or (train.get("inputs") or {}).get("base_model_root")
    ckpt = (train.get("outputs") or {}).get("checkpoints") or {}
    return [
        d
        for d in (
            _descriptor(
                "dataset",
                clean.get("path"),
                _digest(clean.get("root")),
                release_dir,
                annotations={"chunk_size": clean.get("chunk_size")} if clean.get("chunk_size") else None,
            ),
            _descriptor("base-model", base.get("path"), _digest(base_root), release_dir),
            _descriptor(f"checkpoint:{ckpt.get('tag')}", ckpt.get("path"), _digest(ckpt.get("root")), release_dir),
        )
        if d.get("digest")
    ]


def statement(record: dict, release_dir: str, pipeline_spec_sha256: str = "") -> dict:
    """The in-toto Statement of a release record (unsigned)."""
    stages = record.get("stages") or {}
    subjects = _subjects(stages, release_dir)
    if not subjects:
        raise InputError("provenance: the release produced no model and no repository to attest")
    deps = _dependencies(stages, release_dir) + _images()
    deps.append(
        {
            "name": "pipeline-spec",
            **(
                {"digest": {"sha256": pipeline_spec_sha256}}
                if pipeline_spec_sha256
                else {"annotations": {"note": "spec hash not supplied"}}
            ),
        }
    )
    portable = portable_record(record, release_dir)
    record_bytes = json.dumps(portable, sort_keys=True).encode()
    params = {name: (s.get("params") or {}) for name, s in stages.items()}
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"run": record.get("run") or "", "stages": params},
                "internalParameters": {"status": record.get("status"), "decision": record.get("decision") or ""},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID},
                "metadata": {"invocationId": record.get("run") or "", "finishedOn": record.get("written_at")},
                "byproducts": [
                    {
                        "name": "record.json",
                        "mediaType": RECORD_MEDIA_TYPE,
                        "digest": {"sha256": hashlib.sha256(record_bytes).hexdigest()},
                        "content": base64.b64encode(record_bytes).decode(),
                    }
                ],
            },
        },
    }


def check_schema(stmt: dict, origin: str) -> None:
    """Parse with the official in-toto Statement and SLSA Provenance v1 protobufs,
    unknown fields rejected, as an attestation consumer would."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    try:
        parsed = json_format.ParseDict(stmt, statement_pb2.Statement())
        Statement.copy_from_pb(parsed).validate()
        json_format.ParseDict(stmt.get("predicate") or {}, provenance_pb2.Provenance())
    except (json_format.ParseError, ValueError) as exc:
        raise InputError(f"{origin}: not a valid in-toto SLSA provenance statement: {exc}") from None
    if stmt.get("predicateType") != PREDICATE_TYPE:
        raise InputError(f"{origin}: predicateType {stmt.get('predicateType')!r} is not {PREDICATE_TYPE}")


def write(
    record: dict, release_dir: str, out_path: str, private_key: str | None, pipeline_spec_sha256: str = ""
) -> dict:
    """Write the statement, in a signed DSSE envelope when a key is given; returns a summary."""
    from kfp_llmops.components.common import atomic

    stmt = statement(record, release_dir, pipeline_spec_sha256)
    check_schema(stmt, out_path)
    doc = signing.sign_statement(stmt, private_key) if private_key else stmt
    atomic.write_json(out_path, doc, indent=2, sort_keys=True)
    return {"signed": bool(private_key), "subjects": [s["name"] for s in stmt["subject"]], "path": out_path}


def open_attestation(path: str, public_key: str | None) -> tuple[dict, dict]:
    """(statement, release record with local paths) from a signed attestation file; the
    envelope's signature is checked first, then the schema, then the embedded record
    against its digest and the subjects against the record."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable attestation: {exc}") from None
    if "payloadType" not in doc:
        raise signing.SignatureError(f"{path}: an unsigned statement, not a DSSE envelope; refusing it")
    if not public_key:
        raise InputError(f"{path}: a signed attestation needs --public-key to be checked")
    stmt = signing.verify_envelope(doc, public_key, path)
    check_schema(stmt, path)
    products = stmt["predicate"].get("runDetails", {}).get("byproducts") or []
    found = [p for p in products if p.get("mediaType") == RECORD_MEDIA_TYPE]
    if not found:
        raise InputError(f"{path}: the statement carries no release record")
    raw = base64.b64decode(found[0].get("content") or "")
    if hashlib.sha256(raw).hexdigest() != found[0].get("digest", {}).get("sha256"):
        raise InputError(f"{path}: the embedded release record does not match its digest")
    record = json.loads(raw)
    expected = {s["name"]: s["digest"] for s in statement(record, ".")["subject"]}
    for subject in stmt["subject"]:
        if expected.get(subject["name"]) != subject.get("digest"):
            raise InputError(
                f"{path}: subject {subject['name']} digest {subject.get('digest')} does not match the "
                f"release record's {expected.get(subject['name'])}"
            )
    return stmt, resolve_record(record, os.path.dirname(os.path.abspath(path)))
