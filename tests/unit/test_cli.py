"""The `llmops` CLI: exit codes 0/1/2, one-line errors, --help everywhere."""

import json
import re

import pytest

from helpers import llmops, sft, write_lines
from kfp_llmops.pipelines.cli.main import main


@pytest.mark.parametrize("args", [[], ["data"], ["data", "validate"], ["data", "make-demo"], ["compile"], ["run"]])
def test_help_everywhere(args, capsys):
    assert main([*args, "--help"]) == 0
    assert "Usage:" in capsys.readouterr().out


def test_exit_codes_pass_gate_fail_and_unusable(tmp_path):
    good = write_lines(tmp_path / "good.jsonl", [sft(i) for i in range(20)])
    rc, out, err = llmops("data", "validate", good, "--out", str(tmp_path / "o1"))
    assert rc == 0 and "rows_out=20" in out
    bad = write_lines(tmp_path / "bad.jsonl", [sft(i) for i in range(10)] + [b"nope"] * 5)
    rc, out, err = llmops("data", "validate", bad, "--out", str(tmp_path / "o2"))
    assert rc == 1 and err.strip().startswith("error: reject_rate 0.3333 (needs <= 0.05): quarantine rate 33.3%")
    assert (tmp_path / "o2" / "clean.jsonl").exists()
    rc, out, err = llmops("data", "validate", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o3"))
    assert rc == 2 and err.strip() == f"error: {tmp_path / 'missing.jsonl'}: no such file or folder"
    assert "Traceback" not in err


def test_bad_option_is_a_usage_error(tmp_path):
    rc, _, err = llmops("data", "validate", "x.jsonl", "--out", str(tmp_path), "--policy", "loose")
    assert rc == 2 and "Invalid value for '--policy'" in err and "Traceback" not in err


def test_make_demo_and_validate_it(tmp_path):
    rc, out, _ = llmops("data", "make-demo", "--out", str(tmp_path / "d"), "--rows", "600")
    made = json.loads(out)
    assert rc == 0 and (made["rows"], made["fact_rows"], made["prose_rows"]) == (750, 600, 150)
    assert (tmp_path / "d" / "train.jsonl").read_bytes().count(b"\n") == 750
    rc, out, err = llmops(
        "data", "validate", str(tmp_path / "d" / "train.jsonl"), "--out", str(tmp_path / "o"), "--policy", "strict"
    )
    assert rc == 0, err
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["by_reason"]["duplicate"] > 0 and metrics["pii_redacted"]
    train = set()
    for line in open(tmp_path / "d" / "train.jsonl", "rb"):
        try:
            train.add(str(json.loads(line)["prompt"]))
        except (ValueError, KeyError, TypeError):
            pass
    evals = [json.loads(line)["prompt"] for line in open(tmp_path / "d" / "eval.jsonl")]
    assert not any(any(e in t for t in train) for e in evals)  # held-out split
    from kfp_llmops.components.deploy.config import DeployConfig
    from kfp_llmops.components.training.config import TrainConfig
    from kfp_llmops.components.watermark.config import WatermarkConfig

    # the configs the demo runs with, for running the stages by hand as the README shows
    assert TrainConfig.load(str(tmp_path / "d" / "train.yaml")).steps == 1200
    assert WatermarkConfig.load(str(tmp_path / "d" / "watermark.yaml")).gate.max_exact_match_cost == 0.10
    assert DeployConfig.load(str(tmp_path / "d" / "deploy.yaml")).steps == [25, 50, 100]


def _on_small_volume(tmp_path, kib: int, *args) -> tuple[int, str, str]:
    """The CLI with `tmp_path/vol` a tmpfs of `kib` KiB (a private mount namespace: a real
    full disk, nothing mounted outside the child); stdout ends with what `vol/out` holds."""
    import shlex
    import shutil
    import subprocess
    import sys

    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) is missing: make installs it")
    vol = tmp_path / "vol"
    vol.mkdir(exist_ok=True)
    cli = shlex.join([sys.executable, "-m", "kfp_llmops.pipelines.cli.main", *args])
    proc = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f"mount -t tmpfs -o size={kib}k tmpfs {vol} && {cli}; rc=$?; echo left:; ls -A {vol}/out; exit $rc",
        ],
        capture_output=True,
        text=True,
        env={"LLMOPS_NO_PROGRESS": "1", "PATH": "/usr/bin:/bin"},
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_a_full_disk_is_one_line_naming_the_path_and_the_free_space(tmp_path):
    rows = write_lines(
        tmp_path / "in.jsonl",
        [sft(i, response=" ".join(f"Fact {i}.{j} holds." for j in range(120))) for i in range(400)],
    )
    rc, out, err = _on_small_volume(tmp_path, 256, "data", "validate", rows, "--out", str(tmp_path / "vol" / "out"))
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "internal error" not in err
    assert re.match(
        rf"error: writing {re.escape(str(tmp_path / 'vol' / 'out'))}/\S+: no space left on device "
        rf"\(\d+(\.\d)? K?i?B free of 256\.0 KiB on {re.escape(str(tmp_path / 'vol'))}\)",
        err.strip(),
    ), err
    assert out.split("left:")[-1].split() == []  # nothing half-written, nothing looking finished
    rc, out, err = _on_small_volume(tmp_path, 4096, "data", "validate", rows, "--out", str(tmp_path / "vol" / "out"))
    assert rc == 0, err  # the same command on a volume with room


def test_the_report_writers_name_the_path_on_a_full_disk(tmp_path):
    """Evaluation, training and deploy write their reports and records through these:
    a full volume is one EnvironmentProblem naming the file, and no partial file stays."""
    import shlex
    import shutil
    import subprocess
    import sys

    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) is missing: make installs it")
    vol = tmp_path / "vol"
    vol.mkdir()
    tree = tmp_path / "model"
    tree.mkdir()
    big = tree / "big.jsonl"
    big.write_bytes(b"x" * 300_000)
    code = (
        f"import shutil\n"
        f"from kfp_llmops.components.common import atomic, errors\n"
        f"for call in (lambda: atomic.copy_file({str(big)!r}, {str(vol / 'copy.jsonl')!r}),\n"
        f"             lambda: atomic.write_json({str(vol / 'record.json')!r}, {{'x': 'y' * 300_000}}),\n"
        f"             lambda: atomic.copy2({str(big)!r}, {str(vol / 'model.py')!r}),\n"
        f"             lambda: atomic.copy_tree({str(tree)!r}, {str(vol / 'tree')!r})):\n"
        f"    try:\n"
        f"        call()\n"
        f"    except errors.EnvironmentProblem as exc:\n"
        f"        print(exc)\n"
    )
    proc = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=128k tmpfs {vol} && "
            f"{shlex.join([sys.executable, '-c', code])}; echo left:; ls -A {vol}",
        ],
        capture_output=True,
        text=True,
    )
    said, left = proc.stdout.split("left:")
    lines = [re.sub(r"\.[0-9a-f]{8}\.partial", ".*.partial", line.split(":")[0]) for line in said.strip().splitlines()]
    assert lines == [
        f"writing {vol / 'copy.jsonl'}",
        f"writing {vol / 'record.json'}",
        f"copying to {vol / 'model.py'}",  # Triton's model file; the weights' copies likewise
        f"copying to {vol / 'tree.*.partial' / 'big.jsonl'}",  # a tree copied across volumes (its own name)
    ], proc.stdout + proc.stderr
    assert all("no space left on device" in line for line in said.strip().splitlines())
    assert left.split() == []
