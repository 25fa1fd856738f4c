"""Container image names, derived in one place (GCPC style: image tag == package
version), so a compiled pipeline always names the images built from the same release.

A platform team's own registry replaces the default without editing anything:
`$LLMOPS_REGISTRY` (and `$LLMOPS_IMAGE_TAG`) rename every image, and
`$LLMOPS_IMAGE_DIGESTS` (a JSON file {stage: "sha256:..."}, `llmops images push` writes
one) pins each by digest, so a GitOps compile references immutable images.
`llmops compile --registry/--tag/--digests` sets them for one compile.
"""

import json
import os

from kfp_llmops.components import __version__

DEFAULT_REGISTRY = "ghcr.io/kfp-llmops"
VERSION = __version__.split("+")[0]
REGISTRY = os.environ.get("LLMOPS_REGISTRY", "").rstrip("/") or DEFAULT_REGISTRY
TAG = os.environ.get("LLMOPS_IMAGE_TAG") or VERSION


def _digests() -> dict:
    path = os.environ.get("LLMOPS_IMAGE_DIGESTS")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError) as exc:
        from kfp_llmops.components.common.errors import InputError

        raise InputError(f"{path}: unreadable image digests ($LLMOPS_IMAGE_DIGESTS): {exc}") from None
    return {k: v for k, v in found.items() if isinstance(v, str) and v.startswith("sha256:")}


DIGESTS = _digests()


def image(stage: str, pinned: bool = True) -> str:
    """`<registry>/<stage>:<tag>`, with `@<digest>` when one is known (and `pinned`)."""
    ref = f"{REGISTRY}/{stage}:{TAG}"
    return f"{ref}@{DIGESTS[stage]}" if pinned and stage in DIGESTS else ref


def customized() -> bool:
    """Are the names other than the defaults the committed pipelines use?"""
    return REGISTRY != DEFAULT_REGISTRY or TAG != VERSION or bool(DIGESTS)


BASE = image("base")
DATA = image("data")
TRAIN = image("train")
EVAL = image("eval")
DEPLOY = image("deploy")
# The images' non-root user (images/Dockerfile.base creates it); pods run as it.
USER, UID = "llmops", 10001
