"""The release's SLSA provenance: built from the stages' notes, checked against the official
in-toto and SLSA protobufs, signed in a DSSE envelope, and every tampering refused with
a line naming it; lineage verify walks the chain from the signed form."""

import base64
import json
import os
import shutil

import pytest

from kfp_llmops.components.common import integrity, records, signing
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.release import lineage, provenance
from kfp_llmops.components.release import record as release_record
from kfp_llmops.pipelines.cli.main import main

ROOT_D, ROOT_C = "d" * 64, "c" * 64


@pytest.fixture()
def release(tmp_path):
    """A release folder with a signed model and a signed repository built from it, and
    the stages' notes as the components write them."""
    keys = tmp_path / "keys"
    signing.generate_keys(str(keys / "private.pem"), str(keys / "public.pem"))
    rel = tmp_path / "release"
    model = rel / "artifacts" / "model"
    os.makedirs(model)
    (model / "model.safetensors").write_bytes(os.urandom(200_000))
    (model / "config.json").write_text("{}")
    model_root = integrity.seal("model", str(model))
    model_sha = signing.sign_folder(str(model), str(keys / "private.pem"))
    repo = rel / "artifacts" / "repository"
    shutil.copytree(model, repo / "llm" / "1" / "weights")
    (repo / "llm" / "config.pbtxt").write_text('name: "llm"\n')
    repo_root = integrity.seal("repository", str(repo))
    repo_sha = signing.sign_folder(str(repo), str(keys / "private.pem"))
    d = str(rel)
    records.note(
        d,
        records.ValidateDataset(
            result="passed",
            params={"pii_policy": "strict"},
            outputs=records.ValidateOutputs(clean=records.CleanData(root=ROOT_D)),
        ),
    )
    records.note(
        d,
        records.TrainZero3(
            params={"train_config": "steps: 6"},
            inputs=records.TrainInputs(dataset_root=ROOT_D),
            outputs=records.TrainOutputs(
                model=records.ModelOut(
                    root=model_root, path=str(model), checkpoint_root=ROOT_C, signed_sha256=model_sha
                ),
                checkpoints=records.CheckpointsOut(
                    root=ROOT_C, path="/minio/mlpipeline/v2/artifacts/run/ckpt", tag="step-6"
                ),
            ),
        ),
    )
    records.note(
        d,
        records.EvaluateLlm(
            result="blessed",
            inputs={"model_root": model_root},
            outputs={"blessing": records.BlessingOut(root=model_root, blessed=True)},
        ),
    )
    records.note(
        d,
        records.TritonCanaryDeploy(
            result="promoted",
            inputs=records.DeployInputs(model_root=model_root, blessed_root=model_root),
            outputs=records.DeployOutputs(
                repository=records.RepositoryOut(
                    root=repo_root, path=str(repo), version=1, weights="llm/1/weights", signed_sha256=repo_sha
                )
            ),
        ),
    )
    rec = release_record.write(d, {"state": "SUCCEEDED", "pipeline_job_resource_name": "run-1"})
    out = str(rel / provenance.FILE_NAME)
    provenance.write(rec, d, out, str(keys / "private.pem"), "ab" * 32)
    return {
        "dir": rel,
        "keys": keys,
        "out": out,
        "model": str(model),
        "repo": str(repo),
        "record": rec,
        "model_sha": model_sha,
        "model_root": model_root,
    }


def _statement(envelope_path) -> dict:
    return json.loads(base64.b64decode(json.load(open(envelope_path))["payload"]))


def test_statement_names_subjects_dependencies_and_portable_paths(release):
    stmt = _statement(release["out"])
    provenance.check_schema(stmt, "statement")
    model = next(s for s in stmt["subject"] if s["name"] == "model")
    assert model["digest"] == {"sha256": release["model_sha"], "merkle-blake3": release["model_root"]}
    assert model["uri"] == "artifacts/model"  # relative to the release folder
    deps = {d["name"]: d for d in stmt["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["dataset"]["digest"] == {"merkle-blake3": ROOT_D}
    assert deps["checkpoint:step-6"]["uri"] == "minio://mlpipeline/v2/artifacts/run/ckpt"  # a pod path as its URI
    assert deps["pipeline-spec"]["digest"] == {"sha256": "ab" * 32} and "image:train" in deps
    params = stmt["predicate"]["buildDefinition"]["externalParameters"]["stages"]
    assert (
        params["train_zero3"] == {"train_config": "steps: 6"} and params["validate_dataset"]["pii_policy"] == "strict"
    )
    text = json.dumps(stmt) + base64.b64decode(stmt["predicate"]["runDetails"]["byproducts"][0]["content"]).decode()
    assert str(release["dir"]) not in text and "PRIVATE" not in text  # no pod-local paths, no key


def test_lineage_verifies_the_signed_attestation(release, capsys):
    public = str(release["keys"] / "public.pem")
    rec = lineage.load_record(release["out"], public)
    ok, links = lineage.verify(rec, public)
    assert ok, [(link.link, link.detail) for link in links if not link.ok]
    names = [link.link for link in links]
    assert names[0] == "attestation" and {"model signature", "repository signature"} <= set(names)
    assert main(["lineage", "verify", release["out"], "--public-key", public, "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"ok", "links"}
    # The model's bytes changed after the release: the signature link names the file.
    with open(os.path.join(release["model"], "config.json"), "a") as handle:
        handle.write(" ")
    ok, links = lineage.verify(lineage.load_record(release["out"], public), public)
    broken = {link.link: link.detail for link in links if not link.ok}
    assert not ok and "changed: config.json" in broken["model signature"]


def test_each_tampering_is_refused(release, tmp_path, capsys):
    public, private = str(release["keys"] / "public.pem"), str(release["keys"] / "private.pem")
    envelope = json.load(open(release["out"]))

    def refused(doc, match, key=public):
        path = tmp_path / "a.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(InputError, match=match):
            lineage.load_record(str(path), key)
        capsys.readouterr()
        assert main(["lineage", "verify", str(path)] + (["--public-key", key] if key else [])) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1

    signing.generate_keys(str(tmp_path / "o.pem"), str(tmp_path / "o.pub"))
    refused(envelope, "does not verify with o.pub", str(tmp_path / "o.pub"))  # another key
    refused(envelope, "needs --public-key", None)  # no key to check with
    refused(_statement(release["out"]), "unsigned statement")  # the bare statement
    stmt = _statement(release["out"])
    stmt["subject"][0]["digest"]["sha256"] = "0" * 64
    forged = dict(envelope, payload=base64.b64encode(json.dumps(stmt).encode()).decode())
    refused(forged, "does not verify")  # payload changed
    refused(signing.sign_statement(stmt, private), "subject model digest")  # re-signed, wrong subject
    stmt = _statement(release["out"])
    stmt["predicate"]["buildDefinition"]["surprise"] = 1
    refused(signing.sign_statement(stmt, private), "not a valid in-toto SLSA provenance statement")
    stmt = _statement(release["out"])
    stmt["predicate"]["runDetails"]["byproducts"][0]["content"] = base64.b64encode(b'{"stages": {}}').decode()
    refused(signing.sign_statement(stmt, private), "does not match its digest")  # record swapped


def test_unsigned_release_still_gets_a_statement(release, tmp_path):
    out = str(tmp_path / "p.json")
    assert provenance.write(release["record"], str(release["dir"]), out, None)["signed"] is False
    assert json.load(open(out))["_type"] == provenance.STATEMENT_TYPE
