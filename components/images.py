"""Container image names, derived in one place from the package version (GCPC style:
image tag == package version), so a compiled pipeline always names the images built
from the same release."""
from kfp_llmops.components import __version__

REGISTRY = "ghcr.io/kfp-llmops"
TAG = __version__.split("+")[0]


def image(stage: str) -> str:
    return f"{REGISTRY}/{stage}:{TAG}"


BASE = image("base")
DATA = image("data")
TRAIN = image("train")
EVAL = image("eval")
DEPLOY = image("deploy")
