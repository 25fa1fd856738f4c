"""`llmops compile`: every pipeline to each GitOps target, byte-deterministic, with
`--check` as the drift gate (non-zero when committed output is stale).

Targets: `kfp` (KFP IR, `compiled/<name>.yaml`: upload in the UI, `kfp run submit`),
`k8s` (`Pipeline` + `PipelineVersion` for KFP's Kubernetes-native mode,
`compiled/k8s/<name>.yaml`), `argo` (a standalone Argo WorkflowTemplate,
`compiled/argo/<name>.yaml`)."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tempfile

import yaml
from kfp import compiler
from kfp.compiler.compiler_utils import KubernetesManifestOptions

from kfp_llmops.components import images
from kfp_llmops.components.common.k8s import DEFAULT_NAMESPACE

from . import argo, ir_check
from .release import PIPELINES

COMPILED_DIR = os.path.join(os.path.dirname(__file__), "compiled")
TARGETS = ("kfp", "k8s", "argo")


class _NoAliases(yaml.SafeDumper):
    """Plain YAML: anchors (`&id001`) from shared dicts confuse reviewers and some tools."""

    def ignore_aliases(self, data) -> bool:
        return True


def _kfp(name: str, **options) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.yaml")
        compiler.Compiler().compile(PIPELINES[name], package_path=path, **options)
        with open(path, encoding="utf-8") as handle:
            return handle.read()


def resource_name(name: str) -> str:
    return f"llmops-{name}"


def spec_digest(name: str) -> str:
    """12 hex digits of SHA-256 over the compiled spec (pipeline + platform spec, as JSON
    with sorted keys): a PipelineVersion's spec is immutable, so its name must change
    whenever the spec does, bumped package version or not."""
    docs = [d for d in yaml.safe_load_all(_kfp(name)) if d]
    return hashlib.sha256(json.dumps(docs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def version_name(name: str) -> str:
    """`<pipeline>-<package version>-<spec digest>`: one name never means two specs."""
    tag = re.sub(r"[^a-z0-9]+", "-", images.TAG.lower()).strip("-")
    return f"{resource_name(name)}-{tag}-{spec_digest(name)}"


def _resolvable(name: str, text: str) -> str:
    """Refuse to hand out IR the KFP driver could not resolve (`ir_check`)."""
    found = ir_check.check_documents([d for d in yaml.safe_load_all(text) if d])
    if found:
        raise RuntimeError(
            f"{name}: compiled IR the KFP driver cannot resolve: {found[0]}"
            + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
        )
    return text


def compile_one(name: str, target: str = "kfp") -> str | None:
    """The compiled text, or None when `target` has no form of this pipeline."""
    if target == "kfp":
        return _resolvable(name, _kfp(name))
    if target == "k8s":
        return _resolvable(
            name,
            _kfp(
                name,
                kubernetes_manifest_format=True,
                kubernetes_manifest_options=KubernetesManifestOptions(
                    pipeline_name=resource_name(name),
                    pipeline_version_name=version_name(name),
                    namespace=DEFAULT_NAMESPACE,
                    include_pipeline_manifest=True,
                ),
            ),
        )
    if target == "argo":
        return yaml.dump(
            argo.workflow_template(name, resource_name(name)), Dumper=_NoAliases, sort_keys=False, width=120
        )
    raise ValueError(f"unknown target {target!r}")


def output_path(out_dir: str, name: str, target: str) -> str:
    return os.path.join(out_dir, f"{name}.yaml") if target == "kfp" else os.path.join(out_dir, target, f"{name}.yaml")


def compile_all(out_dir: str = COMPILED_DIR, check: bool = False, targets: tuple[str, ...] = TARGETS) -> list[str]:
    """Write (or, with check, compare) each pipeline for each target; return what differs."""
    stale = []
    for target in targets:
        for name in sorted(PIPELINES):
            text = compile_one(name, target)
            if text is None:
                continue
            path = output_path(out_dir, name, target)
            current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            if current == text:
                continue
            stale.append(os.path.relpath(path, out_dir))
            if check:
                diff = difflib.unified_diff(
                    (current or "").splitlines(),
                    text.splitlines(),
                    f"committed/{name}.yaml",
                    f"compiled/{name}.yaml",
                    lineterm="",
                    n=1,
                )
                print("\n".join(list(diff)[:40]))
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
    return stale
