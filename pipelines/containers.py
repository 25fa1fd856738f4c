"""Build the stage images, move them to the engine that runs them, push them.

Images are built with podman (`podman build`, rootful): the machine's pip configuration
(index URLs, find-links, constraints, CA bundle; `pip config list` merges files and
`PIP_*` variables) is written to a temporary pip.conf and mounted read-only into each
build with the local paths it names, so nothing of it stays in an image. The Python
base is the pinned `python:3.11-slim` digest where a registry answers, or a Python 3.11
root filesystem bootstrapped from Debian's packages (debootstrap) where none does
(`base_source`). Each image carries labels with the package version and a digest of
the sources it was built from, so an unchanged tree reuses its images and a stale image
is named, not run. dockerd runs them (kfp.local's DockerRunner): `podman save | docker load`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

from kfp_llmops.components import images
from kfp_llmops.components.common.errors import InputError, LlmopsError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ["base", "data", "train", "eval", "deploy"]
PINNED_PYTHON = (
    "docker.io/library/python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7"
)
DEBIAN_PYTHON = "localhost/kfp-llmops/python:3.11-bookworm"
DEBIAN_PACKAGES = "python3.11,python3.11-venv,python3-venv,libpython3.11,ca-certificates,passwd"
LABEL_VERSION, LABEL_SOURCE = "io.kfp-llmops.version", "io.kfp-llmops.source"
SOURCES = ("pyproject.toml", "setup.py", "README.md", "components", "pipelines", "images")
CONTAINERS_CONF = (
    '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
    '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
)
DOCKER_SOCKET = "/var/run/docker.sock"
WORK = os.path.join(ROOT, "build", "images")  # build logs, pip.conf, containers.conf, digests


def _run(cmd: list[str], what: str, env: dict | None = None, stdin=None, log_to: str | None = None) -> str:
    """Run; on failure one line with the command's last error line (the whole output in `log_to`)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=stdin)
    except FileNotFoundError:
        raise LlmopsError(f"{cmd[0]}: not installed ({what}; `make images` installs the container engines)") from None
    if log_to:
        with open(log_to, "w", encoding="utf-8") as handle:
            handle.write(done.stdout + done.stderr)
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        errors = [ln for ln in lines if "error" in ln.lower()] or lines
        where = f" (log: {log_to})" if log_to else ""
        raise LlmopsError(f"{what} failed: {errors[-1].strip() if errors else done.returncode}{where}")
    return done.stdout


def inspect_image(engine: str, image: str, env: dict | None = None) -> tuple[str, dict] | None:
    """(the ID `image` names in `engine`, podman or docker, and its labels), in one
    inspect; None where it names none."""
    done = subprocess.run(
        [engine, "image", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", image],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None
    ident, _, labels = done.stdout.strip().partition(" ")
    return ident, json.loads(labels or "null") or {}


def image_id(engine: str, image: str, env: dict | None = None) -> str | None:
    """The ID `image` names in `engine`, None where it names none."""
    found = inspect_image(engine, image, env)
    return found[0] if found else None


def drop_superseded(engine: str, before: dict[str, str | None], env: dict | None = None, log=print) -> None:
    """Remove the images a rebuild or load took the names from (`before`: name -> the ID it
    named), so rebuilding does not fill the disk with untagged copies (3 GB for deploy). One
    still used by a container is kept and said so."""
    for image, old in reversed(before.items()):  # the stages before the deps they were built on
        if old is None or image_id(engine, image, env) == old:
            continue
        done = subprocess.run([engine, "rmi", old], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            log(f"[images] kept the previous {image} ({old[:19]}): {done.stderr.strip().splitlines()[-1:]}")


def podman_env(work: str) -> dict:
    """podman needs these two settings on these machines (crun's RLIMIT_NOFILE, cgroups)."""
    path = os.path.join(work, "containers.conf")
    os.makedirs(work, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": path}


def source_digest() -> str:
    """SHA-256 over the files an image is built from (paths and bytes, sorted)."""
    h = hashlib.sha256()
    for top in SOURCES:
        base = os.path.join(ROOT, top)
        paths = (
            [base]
            if os.path.isfile(base)
            else sorted(
                os.path.join(d, f)
                for d, dirs, files in os.walk(base)
                for f in files
                if "__pycache__" not in d and not f.endswith((".pyc", ".so"))  # built here, not sources
            )
        )
        for path in paths:
            h.update(os.path.relpath(path, ROOT).encode() + b"\0")
            with open(path, "rb") as handle:
                h.update(hashlib.sha256(handle.read()).digest())
    return h.hexdigest()[:16]


def pip_settings(work: str) -> tuple[str, list[str]]:
    """(pip.conf for the builds, local paths it names) from this machine's pip config."""
    try:
        listed = subprocess.run(["python3", "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    except OSError:
        listed = ""
    values: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        name = key.split(".", 1)[-1]
        if name and value:
            values[name] = value.strip().strip("'\"")
    mounts = []
    for name in ("find-links", "constraint", "cert", "index-url", "extra-index-url"):
        for item in values.get(name, "").split():
            path = item.removeprefix("file://").rstrip("/")
            if name.endswith("index-url") and os.path.basename(path) == "simple":
                path = os.path.dirname(path)  # its pages link to files beside simple/
            if path.startswith("/") and os.path.exists(path):
                mounts.append(path)
    conf = os.path.join(work, "pip.conf")
    with open(conf, "w", encoding="utf-8") as handle:
        handle.write("[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(values.items())))
    return conf, sorted(set(mounts))


def _scrub(image: str, mounts: list[str], work: str, env: dict) -> None:
    """Remove what the build-time mounts left: empty mount-point files and folders (and
    folders made only to hold them). Files a base image already had are not empty: kept."""
    rm = " ; ".join(
        f"if [ -f {p} ] && [ ! -s {p} ]; then rm -f {p}; fi ; "
        f"if [ -d {p} ]; then find {p} -depth -type d -empty -delete; fi ; "
        f'd=$(dirname {p}); while [ "$d" != / ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done'
        for p in mounts
    )
    containerfile = os.path.join(work, "Containerfile.scrub")
    with open(containerfile, "w", encoding="utf-8") as handle:
        handle.write(f"FROM {image}\nUSER 0:0\nRUN {rm}\nUSER {images.UID}:{images.UID}\n")
    _run(["podman", "build", "--pull=never", "-f", containerfile, "-t", image, work], f"scrubbing {image}", env=env)


def registry_reachable(env: dict) -> bool:
    done = subprocess.run(
        ["podman", "pull", "--quiet", PINNED_PYTHON], capture_output=True, text=True, env=env, timeout=120
    )
    return done.returncode == 0


def debian_python_base(work: str, env: dict, log=print) -> str:
    """A Python 3.11 image from Debian bookworm's packages: /opt/venv first on PATH."""
    if inspect_image("podman", DEBIAN_PYTHON, env) is not None:
        return DEBIAN_PYTHON
    rootfs = tempfile.mkdtemp(prefix="rootfs-", dir=work)
    try:
        log(f"[images] bootstrapping {DEBIAN_PYTHON} from Debian packages (debootstrap)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={DEBIAN_PACKAGES}",
                "bookworm",
                rootfs,
                "http://deb.debian.org/debian",
            ],
            "debootstrap",
        )
        _run(["chroot", rootfs, "python3.11", "-m", "venv", "/opt/venv"], "creating /opt/venv")
        for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
            shutil.rmtree(os.path.join(rootfs, junk), ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        _run(
            [
                "podman",
                "import",
                "--change",
                "ENV=PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "-",
                DEBIAN_PYTHON,
            ],
            "podman import",
            env=env,
            stdin=tar.stdout,
        )
        tar.wait()
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return DEBIAN_PYTHON


def build(
    base_source: str = "auto", stages: list[str] | None = None, work: str | None = None, log=print
) -> dict[str, dict]:
    """Build (or reuse) each stage image; returns {stage: {image, seconds, bytes, reused}}."""
    work = work or WORK
    env = podman_env(work)
    source = source_digest()
    if base_source == "auto":
        base_source = "pinned" if registry_reachable(env) else "debian"
    if base_source not in ("pinned", "debian"):
        raise InputError(f"base_source: {base_source!r} is not auto, pinned or debian")
    python = PINNED_PYTHON if base_source == "pinned" else debian_python_base(work, env, log)
    conf, mounts = pip_settings(work)
    volumes = [f"{conf}:/etc/pip.conf:ro"] + [f"{p}:{p}:ro" for p in mounts]
    report = {}
    deps = f"localhost/kfp-llmops/deps:{images.TAG}"
    common = ["--network=host", "--pull=never", "--format=docker", "--build-arg", f"PYTHON_BASE={python}"]
    for v in volumes:
        common += ["-v", v]
    # The base's dependency stage: the stage images build on it (cached unless pyproject.toml changes).
    before = {deps: image_id("podman", deps, env)}
    _run(
        [
            "podman",
            "build",
            *common,
            "--target",
            "deps",
            "-f",
            os.path.join(ROOT, "images", "Dockerfile.base"),
            "-t",
            deps,
            ROOT,
        ],
        f"building {deps}",
        env=env,
        log_to=os.path.join(work, "deps.log"),
    )
    for stage in stages or STAGES:
        image = images.image(stage, pinned=False)
        found = inspect_image("podman", image, env)
        labels = found[1] if found else {}
        if labels.get(LABEL_SOURCE) == source and labels.get(LABEL_VERSION) == images.VERSION:
            report[stage] = {"image": image, "seconds": 0.0, "reused": True}
            continue
        log(f"[images] building {image} ({base_source} base)")
        before[image] = found[0] if found else None
        t0 = time.monotonic()
        cmd = [
            "podman",
            "build",
            *common,
            "-f",
            os.path.join(ROOT, "images", f"Dockerfile.{stage}"),
            "-t",
            image,
            "--label",
            f"{LABEL_VERSION}={images.VERSION}",
            "--label",
            f"{LABEL_SOURCE}={source}",
            "--build-arg",
            f"BASE={deps}",
        ]
        _run(cmd + [ROOT], f"building {image}", env=env, log_to=os.path.join(work, f"{stage}.log"))
        _scrub(image, ["/etc/pip.conf", *mounts], work, env)
        report[stage] = {"image": image, "seconds": round(time.monotonic() - t0, 1), "reused": False}
    drop_superseded("podman", before, env, log)
    for entry in report.values():
        size = _run(["podman", "image", "inspect", "--format", "{{.Size}}", entry["image"]], "inspect", env=env)
        entry["bytes"] = int(size.strip() or 0)
    return report


def docker_ready(start: bool = False, timeout: float = 60.0) -> None:
    """dockerd answers on its socket (started here when `start` and it is not running)."""

    def ok() -> bool:
        return subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True).returncode == 0

    if shutil.which("docker") is None:
        raise LlmopsError("docker: not installed (run `make images`, which installs docker.io)")
    if ok():
        return
    if not start:
        raise LlmopsError(
            f"dockerd is not running ({DOCKER_SOCKET}); start it: "
            "dockerd --host unix:///var/run/docker.sock --storage-driver overlay2 &"
        )
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    log = open(os.path.join(tempfile.gettempdir(), "kfp-llmops-dockerd.log"), "ab")
    subprocess.Popen(
        [dockerd, "--host", f"unix://{DOCKER_SOCKET}", "--storage-driver", "overlay2"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.5)
    raise LlmopsError(
        f"dockerd did not start within {timeout:.0f} s (log: {tempfile.gettempdir()}/kfp-llmops-dockerd.log)"
    )


def load_into_docker(stages: list[str] | None = None, work: str | None = None, log=print) -> None:
    """Copy the images podman built into dockerd (one multi-image archive, shared layers
    once), skipping those dockerd already has from the same sources."""
    work = work or WORK
    env = podman_env(work)
    before: dict[str, str | None] = {}  # the images to load, and the ID each name has in dockerd now
    for stage in stages or STAGES:
        image = images.image(stage, pinned=False)
        want = inspect_image("podman", image, env)
        if want is None:
            raise LlmopsError(f"{image}: not built (run `make images`)")
        have = inspect_image("docker", image)
        if not have or have[1].get(LABEL_SOURCE) != want[1].get(LABEL_SOURCE):
            before[image] = have[0] if have else None
    todo = list(before)
    if not todo:
        return
    log(f"[images] loading {', '.join(todo)} into dockerd")
    save = subprocess.Popen(["podman", "save", "--multi-image-archive", *todo], stdout=subprocess.PIPE, env=env)
    _run(["docker", "load", "-q"], "docker load", stdin=save.stdout)
    if save.wait() != 0:
        raise LlmopsError(f"podman save {' '.join(todo)} failed")
    drop_superseded("docker", before, log=log)


def check_runnable(stages: list[str] | None = None) -> None:
    """Every stage image is in dockerd and built from this tree: else one line naming it."""
    source = source_digest()
    for stage in stages or STAGES:
        image = images.image(stage, pinned=False)
        found = inspect_image("docker", image)
        fix = "run `make images`"
        if found is None:
            raise InputError(f"{image}: no such image in dockerd ({fix})")
        labels = found[1]
        if labels.get(LABEL_VERSION) != images.VERSION:
            raise InputError(
                f"{image}: built from package version {labels.get(LABEL_VERSION)}, this is {images.VERSION} ({fix})"
            )
        if labels.get(LABEL_SOURCE) != source:
            raise InputError(f"{image}: built from other sources than this tree ({fix})")


def push(
    registry: str, tag: str | None = None, digests_file: str | None = None, work: str | None = None, log=print
) -> dict[str, str]:
    """Tag each image under `registry` and push it; returns {stage: digest} (written to
    `digests_file` as JSON for `llmops compile --digests`)."""
    work = work or WORK
    env = podman_env(work)
    tag = tag or images.TAG
    out = {}
    for stage in STAGES:
        src, dst = images.image(stage, pinned=False), f"{registry.rstrip('/')}/{stage}:{tag}"
        _run(["podman", "tag", src, dst], f"tagging {dst}", env=env)
        digest_file = os.path.join(work, f"{stage}.digest")
        _run(["podman", "push", "--digestfile", digest_file, dst], f"pushing {dst}", env=env)
        with open(digest_file, encoding="utf-8") as handle:
            out[stage] = handle.read().strip()
        log(f"[images] pushed {dst}@{out[stage]}")
    if digests_file:
        with open(digests_file, "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=2, sort_keys=True)
    return out
