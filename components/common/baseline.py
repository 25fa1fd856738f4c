"""The last promoted release, as the baseline of the next one.

When a run's canary is promoted, its release record is the new production, and the exit
handler writes `promoted.json` beside the run folders on the release volume: which
record, its SHA-256 and the model it released. The next run's validate_dataset reads
that release's data statistics (drift, PSI) and evaluate_llm its blessed metrics (the
change thresholds: "no worse than production") and its model (the win rate), from the
first place the record names that the pod reaches, verified against the model root. The record names each file with its
SHA-256, so a baseline that does not verify fails the stage, loudly, rather than being
skipped; a first release, with no promoted.json, says it has no baseline.

`baseline_release`: "auto" (the default: `promoted.json` in the folder that holds
`release_dir`, i.e. the release volume's root), "none", the path of a promoted.json, or a
pinned record, `<record.json>#sha256=<hex>`. The pipelines pin the baseline in a task of
its own (`pin`) before the stages that use it, so a cached stage's key names the release
it compared with: a new promotion is a new key, never a stale comparison.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from . import atomic, integrity
from .errors import InputError
from .fetch import fetch
from .integrity import sha256_file

FORMAT = "kfp-llmops-promoted/1"
POINTER = "promoted.json"
PRODUCTION = "production"  # beside the run folders: the promoted model, for the next run's win rate


@dataclass
class Baseline:
    pointer: str
    record: str  # the promoted release's record.json (its folder names the run)
    run: str | None
    model_root: str | None
    eval_metrics: dict | None  # evaluate_llm's metrics of the promoted model
    stats_path: str | None  # validate_dataset's stats of the data it was trained on
    model_places: list[str]  # where the record says the model is: trained, deployed, serving, served
    record_sha256: str  # of the very bytes parsed above (what a pin names)

    def describe(self) -> str:
        return (
            f"promoted release {os.path.basename(os.path.dirname(self.record))} (model "
            f"{str(self.model_root or '?')[:16]}…, {self.record})"
        )


def pointer_path(release_dir: str, setting: str = "auto") -> str | None:
    setting = (setting or "auto").strip()
    if setting == "none":
        return None
    if setting == "auto":
        return os.path.join(os.path.dirname(os.path.abspath(release_dir)), POINTER) if release_dir else None
    return setting


def keep_model(release_dir: str, model_dir: str, root: str) -> str | None:
    """A copy of the model being promoted on the release volume (`production/<root>`,
    hard links where it can), where the next run's evaluation finds it whatever storage
    the pipeline's artifacts live in. The copy before it stays until the next promotion
    (the pointer names it until the exit handler moves on); older ones are removed."""
    if not release_dir:
        return None
    folder = os.path.join(os.path.dirname(os.path.abspath(release_dir)), PRODUCTION)
    dest = os.path.join(folder, root)
    if not os.path.isdir(dest):
        atomic.copy_tree(model_dir, dest)
    integrity.verify("model", dest, root)
    os.utime(dest)
    import shutil

    others = sorted(
        (os.path.join(folder, d) for d in os.listdir(folder) if d != root), key=os.path.getmtime, reverse=True
    )
    for stale in others[1:]:
        shutil.rmtree(stale, ignore_errors=True)
    return dest


def promote(release_dir: str, record_path: str, record: dict) -> str:
    """Point the release volume's promoted.json at this run's record (the exit handler's
    job), compare-and-swap: only over the release whose model this promotion replaced (its
    deploy record's `production_root`), so no promotion overwrites one it did not see. A
    pointer that moved on meanwhile is left as it is: InputError naming both."""
    import fcntl

    path = pointer_path(release_dir)
    deploy = record.get("stages", {}).get("triton_canary_deploy", {})
    inputs = deploy.get("inputs", {})
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = _pointer(path) if os.path.exists(path) else None
        if (
            current is not None
            and "production_root" in inputs
            and current.get("model_root") != inputs["production_root"]
        ):
            replaced = inputs["production_root"]
            raise InputError(
                f"{path}: not moved to run {record.get('run')}: it names run {current.get('run')} (model "
                f"{str(current.get('model_root'))[:16]}…), but this promotion replaced model "
                f"{str(replaced)[:16] + '…' if replaced else 'none'}; another promotion came between"
            )
        atomic.write_text(
            path,
            json.dumps(
                {
                    "format": FORMAT,
                    "run": record.get("run"),
                    "record": os.path.abspath(record_path),
                    "record_sha256": sha256_file(record_path),
                    "model_root": inputs.get("model_root"),
                },
                indent=2,
            )
            + "\n",
        )
    return path


def _pointer(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            pointer = json.load(handle)
        if pointer.get("format") != FORMAT:
            raise ValueError(f"format is {pointer.get('format')!r}, expected {FORMAT!r}")
        missing = {"record", "record_sha256"} - pointer.keys()
        if missing:
            raise KeyError(", ".join(sorted(missing)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a promoted-release pointer: {exc}") from None
    return pointer


PIN = "#sha256="


def pin(release_dir: str, setting: str = "auto") -> str:
    """`setting` resolved now to the record it names, `<record.json>#sha256=<hex>`, after
    verifying it; "none" when there is no promoted release yet (or none is wanted)."""
    found = load(release_dir, setting)
    return f"{found.record}{PIN}{found.record_sha256}" if found else "none"


def load(release_dir: str, setting: str = "auto") -> Baseline | None:
    """The promoted release's baseline, verified; None when there is none yet."""
    if PIN in (setting or ""):
        record_path, expected = setting.strip().rsplit(PIN, 1)
        return _from_record("baseline_release", record_path, expected)
    path = pointer_path(release_dir, setting)
    if path is None or not os.path.exists(path):
        if path is not None and setting not in ("", "auto"):
            raise InputError(f"baseline_release: {path}: no such file")
        return None
    pointer = _pointer(path)
    return _from_record(path, pointer["record"], pointer["record_sha256"])


def _from_record(origin: str, record_path: str, expected: str) -> Baseline:
    """The baseline a promoted release record names, every file verified (`origin`: what named it)."""
    if not os.path.isfile(record_path):
        raise InputError(f"{origin}: the promoted release record {record_path} is missing")
    with open(record_path, "rb") as handle:  # hashed and parsed from the same bytes
        data = handle.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise InputError(
            f"{origin}: the promoted release record {record_path} does not verify "
            f"(SHA-256 {digest}, {origin} says {expected})"
        )
    try:
        record = json.loads(data)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise InputError(f"{record_path}: not a release record: {exc}") from None
    stages = record.get("stages", {})
    stats = stages.get("validate_dataset", {}).get("outputs", {}).get("stats") or {}
    stats_path = stats.get("path")
    if stats_path:
        if not os.path.isfile(stats_path):
            raise InputError(f"{record_path}: the baseline data stats {stats_path} are missing")
        got = sha256_file(stats_path)
        if got != stats.get("root"):
            raise InputError(
                f"{record_path}: the baseline data stats {stats_path} do not verify "
                f"(SHA-256 {got}, the record says {stats.get('root')})"
            )
    evaluated = stages.get("evaluate_llm", {})
    model_root = (stages.get("triton_canary_deploy") or {}).get("inputs", {}).get("model_root")
    return Baseline(
        origin,
        record_path,
        record.get("run"),
        model_root,
        evaluated.get("metrics") or None,
        stats_path,
        _model_places(stages),
        digest,
    )


def _model_places(stages: dict) -> list[str]:
    """The copy kept on the release volume, the trained model's folder, the deployed
    repository's weights, the stable copy in the local target's serving state, and the
    copy KServe serves."""
    from .records import read_serving_state, served_dir

    model = ((stages.get("train_zero3") or {}).get("outputs") or {}).get("model") or {}
    deploy = (stages.get("triton_canary_deploy") or {}).get("outputs") or {}
    repo, state = deploy.get("repository") or {}, (deploy.get("serving_state") or {}).get("path")
    places = [(deploy.get("production") or {}).get("path"), model.get("path")]
    if repo.get("weights"):
        places.append(os.path.join(repo["path"], repo["weights"]) if repo.get("path") else None)
        serving = read_serving_state(state) if state else {}
        stable = serving.get("stable") or {}
        if stable.get("model_name") and stable.get("version") is not None:  # versions count on as it serves
            places.append(
                os.path.join(
                    served_dir(state, state=serving),
                    stable["model_name"],
                    str(stable["version"]),
                    os.path.basename(repo["weights"]),
                )
            )
        places.append(f"{deploy['served_uri'].rstrip('/')}/{repo['weights']}" if deploy.get("served_uri") else None)
    return [p for p in places if p]


def model_folder(places: list[str], root: str | None, work: str) -> tuple[str | None, list[str]]:
    """The first of `places` this pod reaches that verifies against `root`; (None, why
    each failed) when none is reachable. When copies were found but none verifies, that
    is an error: the model in production is not the one the release record names."""
    if not root:
        raise InputError("the production model has no pinned Merkle root to verify it by")
    missed, wrong = [], []
    for k, place in enumerate(places):
        try:
            folder = fetch(place, work, f"production_model_{k}")
        except InputError as exc:
            missed.append(str(exc))
            continue
        try:
            integrity.verify("model", folder, root)
        except InputError as exc:
            wrong.append(str(exc))
            continue
        return folder, missed + wrong
    if wrong:
        raise InputError(wrong[0])
    return None, missed


def compared_with(found: Baseline | None) -> dict:
    """What a blessing records of the production release it was judged against: the pin
    and its model ("none" and None on a first release). Deploy promotes only while that
    model still serves (`on_stale_baseline`)."""
    if found is None:
        return {"release": "none", "model_root": None}
    return {"release": f"{found.record}{PIN}{found.record_sha256}", "model_root": found.model_root}


def note(baseline: Baseline | None) -> str:
    return f"baseline: {baseline.describe()}" if baseline else "first release: no promoted release to compare with"
