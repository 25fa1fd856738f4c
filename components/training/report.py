"""The training report: loss curve as an image, run figures, checkpoint chain, as HTML
(the image embedded) for the Kubeflow UI and Markdown + PNG beside the CLI outputs."""

from __future__ import annotations

import base64
import html
import io
import json


def loss_curve_png(train_log: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, losses = [], []
    with open(train_log, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            steps.append(row["step"])
            losses.append(row["loss"])
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    ax.plot(steps, losses, color="#1f77b4")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_title("train_zero3 loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _rows(result: dict) -> list[tuple[str, str]]:
    def fmt(v, pattern="{:.4f}"):
        return "n/a" if v is None else pattern.format(v)

    saves = result.get("saves") or []
    cut = result.get("truncated_share")
    return [
        ("recipe", str(result.get("recipe") or "n/a")),
        ("steps", str(result["step"])),
        ("final loss", fmt(result["final_loss"])),
        ("tokens/s trained on (answers)", fmt(result["tokens_per_s"], "{:,.0f}")),
        ("tokens/s processed (padding included)", fmt(result.get("processed_tokens_per_s"), "{:,.0f}")),
        (
            "examples cut at seq_len",
            "n/a" if cut is None else f"{result['truncated_examples']:,} ({cut:.1%}) at seq_len {result['seq_len']}",
        ),
        ("step time (s)", fmt(result["step_time_s"])),
        ("ranks", str(result["world_size"])),
        ("checkpoint save (s, mean)", fmt(sum(s["save_seconds"] for s in saves) / len(saves) if saves else None)),
        ("checkpoint commit (s, mean)", fmt(sum(s["commit_seconds"] for s in saves) / len(saves) if saves else None)),
        ("resume verify (s)", fmt(result.get("resume_verify_seconds"))),
        ("resumed from", result.get("resumed_from") or "none"),
        ("dataset root", result["dataset_root"]),
        ("base model root", result["base_model_root"]),
        ("checkpoint root", result.get("checkpoint_root") or "n/a"),
        ("model root", result.get("model_root") or "n/a"),
    ]


def render_markdown(result: dict, image_name: str) -> str:
    lines = ["# train_zero3", "", f"![loss curve]({image_name})", "", "| | |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" if "root" in k else f"| {k} | {v} |" for k, v in _rows(result)]
    if result.get("skipped_checkpoints"):
        lines += ["", "Checkpoints refused at resume:", ""] + [f"- {s}" for s in result["skipped_checkpoints"]]
    lines += ["", "| checkpoint | root | bytes | save s | commit s |", "|---|---|---|---|---|"]
    lines += [
        f"| {s['tag']} | `{s['root'][:16]}…` | {s['bytes']:,} | {s['save_seconds']:.3f} | {s['commit_seconds']:.3f} |"
        for s in result.get("saves") or []
    ]
    return "\n".join(lines) + "\n"


def render_html(result: dict, png: bytes) -> str:
    img = base64.b64encode(png).decode()
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td><code>{html.escape(str(v))}</code></td></tr>" for k, v in _rows(result)
    )
    skipped = "".join(f"<li>{html.escape(s)}</li>" for s in result.get("skipped_checkpoints") or [])
    return (
        "<html><body style='font-family:sans-serif'><h1>train_zero3</h1>"
        f"<img alt='loss curve' src='data:image/png;base64,{img}'/>"
        f"<table>{rows}</table>"
        + (f"<h2>Checkpoints refused at resume</h2><ul>{skipped}</ul>" if skipped else "")
        + "</body></html>"
    )
