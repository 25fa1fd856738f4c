"""The evaluation report: the gate's checks, score histograms as images, and the ten
worst samples by BERTScore and by toxicity (HTML for the Kubeflow UI, Markdown + PNG
beside the CLI outputs)."""
from __future__ import annotations

import base64
import html
import io


def histograms_png(samples: list[dict]) -> bytes:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    axes[0].hist([s["bertscore_f1"] for s in samples], bins=20, color="#1f77b4")
    axes[0].set_title("BERTScore F1 per sample")
    tox = [max(v for k, v in s.items() if k.startswith("toxicity_")) for s in samples]
    axes[1].hist(tox, bins=20, range=(0, 1), color="#d62728")
    axes[1].set_title("max toxicity per response (either detector)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _fmt(v) -> str:
    return "n/a" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _worst(samples: list[dict]) -> tuple[list[dict], list[dict]]:
    by_bs = sorted(samples, key=lambda s: s["bertscore_f1"])[:10]
    by_tox = sorted(samples, key=lambda s: -max(v for k, v in s.items() if k.startswith("toxicity_")))[:10]
    return by_bs, by_tox


def render_markdown(result: dict, image_name: str) -> str:
    verdict = "BLESSED" if result["blessed"] else "NOT BLESSED"
    det = result["detoxify"]
    lines = [f"# evaluate_llm: {verdict}", "", f"Model root `{result['model_root']}`; "
             f"Detoxify checkpoint `{det['checkpoint']}` (sha256 `{det['sha256']}`).", ""]
    if result["baseline_note"]:
        lines += [f"*{result['baseline_note']}*", ""]
    lines += ["| check | metric | value | baseline | bound | verdict | note |", "|---|---|---|---|---|---|---|"]
    for c in result["checks"]:
        lines.append(f"| {c['kind']} | {c['metric']} | {_fmt(c['value'])} | {_fmt(c['baseline'])} | {c['bound']} | "
                     f"{c['verdict'].upper()} | {c['reason']} |")
    lines += ["", f"![score histograms]({image_name})", "", "## Metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in result["metrics"].items()]
    by_bs, by_tox = _worst(result["samples"])
    for title, rows in (("Ten worst by BERTScore", by_bs), ("Ten most toxic", by_tox)):
        lines += ["", f"## {title}", "", "| id | prompt | response | reference | F1 | flagged |", "|---|---|---|---|---|---|"]
        lines += [f"| {s['id']} | {_cell(s['prompt'])} | {_cell(s['response'])} | {_cell(s['reference'])} | "
                  f"{s['bertscore_f1']:.3f} | {s['flagged']} |" for s in rows]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:120]


def render_html(result: dict, png: bytes) -> str:
    verdict = "BLESSED" if result["blessed"] else "NOT BLESSED"
    esc = html.escape
    checks = "".join(f"<tr><td>{esc(c['kind'])}</td><td>{esc(c['metric'])}</td><td>{_fmt(c['value'])}</td>"
                     f"<td>{_fmt(c['baseline'])}</td><td>{esc(c['bound'])}</td><td><b>{c['verdict'].upper()}</b></td>"
                     f"<td>{esc(c['reason'])}</td></tr>" for c in result["checks"])
    by_bs, by_tox = _worst(result["samples"])
    tables = ""
    for title, rows in (("Ten worst by BERTScore", by_bs), ("Ten most toxic", by_tox)):
        body = "".join(f"<tr><td>{esc(s['id'])}</td><td>{esc(s['prompt'])}</td><td>{esc(s['response'])}</td>"
                       f"<td>{esc(s['reference'])}</td><td>{s['bertscore_f1']:.3f}</td><td>{s['flagged']}</td></tr>"
                       for s in rows)
        tables += (f"<h2>{title}</h2><table border=1><tr><th>id</th><th>prompt</th><th>response</th>"
                   f"<th>reference</th><th>F1</th><th>flagged</th></tr>{body}</table>")
    det = result["detoxify"]
    note = f"<p><i>{esc(result['baseline_note'])}</i></p>" if result["baseline_note"] else ""
    return (f"<html><body style='font-family:sans-serif'><h1>evaluate_llm: {verdict}</h1>"
            f"<p>Model root <code>{esc(result['model_root'])}</code>; Detoxify checkpoint "
            f"<code>{esc(det['checkpoint'])}</code> sha256 <code>{esc(det['sha256'])}</code></p>{note}"
            "<table border=1><tr><th>check</th><th>metric</th><th>value</th><th>baseline</th><th>bound</th>"
            f"<th>verdict</th><th>note</th></tr>{checks}</table>"
            f"<img alt='score histograms' src='data:image/png;base64,{base64.b64encode(png).decode()}'/>"
            f"{tables}</body></html>")
