"""The `llmops` CLI: exit codes 0/1/2, one-line errors, --help everywhere."""
import json

import pytest

from helpers import llmops, sft, write_lines
from kfp_llmops.pipelines.cli.main import main


@pytest.mark.parametrize("args", [[], ["data"], ["data", "validate"], ["data", "make-demo"],
                                  ["compile"], ["run"]])
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
    assert rc == 2 and err.strip() == f"error: {tmp_path / 'missing.jsonl'}: no such file"
    assert "Traceback" not in err


def test_bad_option_is_a_usage_error(tmp_path):
    rc, _, err = llmops("data", "validate", "x.jsonl", "--out", str(tmp_path), "--policy", "loose")
    assert rc == 2 and "Invalid value for '--policy'" in err and "Traceback" not in err


def test_make_demo_and_validate_it(tmp_path):
    rc, out, _ = llmops("data", "make-demo", "--out", str(tmp_path / "d"), "--rows", "600")
    made = json.loads(out)
    assert rc == 0 and (made["rows"], made["fact_rows"], made["prose_rows"]) == (750, 600, 150)
    assert (tmp_path / "d" / "train.jsonl").read_bytes().count(b"\n") == 750
    rc, out, err = llmops("data", "validate", str(tmp_path / "d" / "train.jsonl"), "--out", str(tmp_path / "o"),
                          "--policy", "strict")
    assert rc == 0, err
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["by_reason"]["duplicate"] > 0 and metrics["pii_redacted"]
    train = set()
    for line in open(tmp_path / "d" / "train.jsonl", "rb"):
        try:
            train.add(str(json.loads(line)["prompt"]))
        except (ValueError, KeyError, TypeError):
            pass
    evals = [json.loads(l)["prompt"] for l in open(tmp_path / "d" / "eval.jsonl")]
    assert not any(any(e in t for t in train) for e in evals)   # held-out split
