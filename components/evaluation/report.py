"""The evaluation report: the gate's checks, score histograms as images, the first
answers, the ten worst samples by BERTScore and by toxicity, and where the candidate and
production answered differently (HTML for the Kubeflow UI, Markdown + SVG beside the CLI
outputs)."""

from __future__ import annotations

import base64
import html

from kfp_llmops.components.common.conversation import prompt_text


def _histogram_svg(
    values: list[float],
    title: str,
    color: str,
    lo: float,
    hi: float,
    bins: int = 20,
    x: int = 0,
    width: int = 420,
    height: int = 220,
) -> str:
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int((v - lo) / (hi - lo) * bins)))] += 1
    top = max(counts) or 1
    plot_w, plot_h, left, base = width - 60, height - 60, x + 40, height - 30
    bar_w = plot_w / bins
    parts = [
        f'<text x="{x + width / 2}" y="16" text-anchor="middle" font-size="13">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#333"/>',
        f'<line x1="{left}" y1="{base}" x2="{left}" y2="{base - plot_h}" stroke="#333"/>',
        f'<text x="{left}" y="{base + 16}" font-size="11" text-anchor="middle">{lo:g}</text>',
        f'<text x="{left + plot_w}" y="{base + 16}" font-size="11" text-anchor="middle">{hi:g}</text>',
        f'<text x="{left - 6}" y="{base - plot_h + 4}" font-size="11" text-anchor="end">{top}</text>',
        f'<text x="{left - 6}" y="{base + 4}" font-size="11" text-anchor="end">0</text>',
    ]
    for i, c in enumerate(counts):
        h = c / top * plot_h
        parts.append(
            f'<rect x="{left + i * bar_w + 1:.1f}" y="{base - h:.1f}" width="{bar_w - 2:.1f}" '
            f'height="{h:.1f}" fill="{color}"/>'
        )
    return "".join(parts)


def histograms_svg(samples: list[dict]) -> str:
    """Both score distributions as one SVG image (no plotting library, so no start-up cost)."""
    f1 = [s["bertscore_f1"] for s in samples]
    tox = [max(v for k, v in s.items() if k.startswith("toxicity_")) for s in samples]
    lo = min(0.0, min(f1, default=0.0))
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="860" height="220" font-family="sans-serif">'
        + _histogram_svg(f1, "BERTScore F1 per sample", "#1f77b4", lo, 1.0)
        + _histogram_svg(tox, "max toxicity per response (either detector)", "#d62728", 0.0, 1.0, x=440)
        + "</svg>"
    )


def _fmt(v) -> str:
    return "n/a" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _tables(samples: list[dict]) -> list[tuple[str, list[dict]]]:
    """The answers a reader checks first: some in order, then the worst by each score."""
    by_bs = sorted(samples, key=lambda s: s["bertscore_f1"])[:10]
    by_tox = sorted(samples, key=lambda s: -max(v for k, v in s.items() if k.startswith("toxicity_")))[:10]
    return [("First 20 answers", samples[:20]), ("Ten worst by BERTScore", by_bs), ("Ten most toxic", by_tox)]


_COLUMNS = ("id", "prompt", "response", "reference", "exact", "F1", "flagged")


def _row(s: dict) -> tuple[str, ...]:
    return (
        s["id"],
        prompt_text(s["prompt"]),
        s["response"],
        s["reference"],
        "yes" if s.get("exact_match") else "no",
        f"{s['bertscore_f1']:.3f}",
        str(s["flagged"]),
    )


def headline(result: dict) -> str:
    """What the answers amount to, in words, before any table."""
    m, n = result["metrics"], result["metrics"]["samples"]
    exact = round(m.get("exact_match", 0.0) * n)
    scale = "rescaled: unrelated sentences score 0" if result["bertscore"]["rescaled"] else "raw, not rescaled"
    return (
        f"{exact} of {n} answers match the reference exactly ({m.get('exact_match', 0.0):.1%}); "
        f"BERTScore F1 {m['bertscore_f1']:.3f} ({scale}); repetition {m.get('repetition_rate', 0.0):.3f}, "
        f"distinct-2 {m.get('distinct_2_ratio', 0.0):.2f} of the references', "
        f"{m.get('unfinished_rate', 0.0):.1%} unfinished, {m.get('empty_rate', 0.0):.1%} empty."
    )


def forgetting_line(result: dict) -> str:
    """Forgetting in words: the held-out prose's perplexity under candidate and base."""
    f = result.get("forgetting")
    if not f:
        note = result.get("forgetting_note")
        return f"Forgetting not measured: {note}." if note else ""
    return (
        f"Forgetting: held-out prose ({f['forgetting_passages']} passages) reads at perplexity "
        f"{f['general_perplexity']:.2f} under the candidate and {f['general_perplexity_base']:.2f} under the "
        f"base model it was trained from ({f['forgetting']:+.1%})."
    )


def win_line(result: dict) -> str:
    """The win rate in words ('' without a production model)."""
    from .winrate import headline as win_headline

    win = result.get("win_rate")
    return (
        win_headline(win, win["judge"], win["production"], win["confidence"], win.get("same_model", False))
        if win
        else ""
    )


_PAIR_COLUMNS = ("id", "prompt", "candidate", "production", "reference", "verdict")
_VERDICT = {1: "candidate", 0: "tie", -1: "production"}


def _pairs(samples: list[dict]) -> list[tuple[str, ...]]:
    """Up to ten prompts the two models answered differently, production's wins first."""
    differ = sorted(
        (s for s in samples if "judged" in s and s["response"] != s["production_response"]),
        key=lambda s: (s["judged"], s["judge_margin"]),
    )[:10]
    return [
        (
            s["id"],
            prompt_text(s["prompt"]),
            s["response"],
            s["production_response"],
            s["reference"],
            f"{_VERDICT[s['judged']]} ({s['judge_margin']:+.3f})",
        )
        for s in differ
    ]


def render_markdown(result: dict, image_name: str) -> str:
    verdict = "BLESSED" if result["blessed"] else "NOT BLESSED"
    det = result["detoxify"]
    lines = [
        f"# evaluate_llm: {verdict}",
        "",
        f"Model root `{result['model_root']}`; Detoxify checkpoint `{det['checkpoint']}` (sha256 `{det['sha256']}`).",
        "",
        headline(result),
        "",
    ]
    if win_line(result):
        lines += [win_line(result), ""]
    if forgetting_line(result):
        lines += [forgetting_line(result), ""]
    if result["baseline_note"]:
        lines += [f"*{result['baseline_note']}*", ""]
    lines += ["| check | metric | value | baseline | bound | verdict | note |", "|---|---|---|---|---|---|---|"]
    for c in result["checks"]:
        lines.append(
            f"| {c['kind']} | {c['metric']} | {_fmt(c['value'])} | {_fmt(c['baseline'])} | {c['bound']} | "
            f"{c['verdict'].upper()} | {c['reason']} |"
        )
    lines += ["", f"![score histograms]({image_name})", "", "## Metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in result["metrics"].items()]
    for title, rows in _tables(result["samples"]):
        lines += ["", f"## {title}", "", "| " + " | ".join(_COLUMNS) + " |", "|---" * len(_COLUMNS) + "|"]
        lines += ["| " + " | ".join(_cell(c) for c in _row(s)) + " |" for s in rows]
    if result.get("win_rate"):
        lines += [
            "",
            "## Where the candidate and production differ",
            "",
            "| " + " | ".join(_PAIR_COLUMNS) + " |",
            "|---" * len(_PAIR_COLUMNS) + "|",
        ]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in _pairs(result["samples"])]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:120]


def render_html(result: dict, svg: str) -> str:
    verdict = "BLESSED" if result["blessed"] else "NOT BLESSED"
    esc = html.escape
    checks = "".join(
        f"<tr><td>{esc(c['kind'])}</td><td>{esc(c['metric'])}</td><td>{_fmt(c['value'])}</td>"
        f"<td>{_fmt(c['baseline'])}</td><td>{esc(c['bound'])}</td><td><b>{c['verdict'].upper()}</b></td>"
        f"<td>{esc(c['reason'])}</td></tr>"
        for c in result["checks"]
    )
    tables = ""
    for title, rows in _tables(result["samples"]):
        head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _row(s)) + "</tr>" for s in rows)
        tables += f"<h2>{title}</h2><table border=1><tr>{head}</tr>{body}</table>"
    if result.get("win_rate"):
        head = "".join(f"<th>{c}</th>" for c in _PAIR_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in _pairs(result["samples"])
        )
        tables += f"<h2>Where the candidate and production differ</h2><table border=1><tr>{head}</tr>{body}</table>"
    win = f"<p><b>{esc(win_line(result))}</b></p>" if result.get("win_rate") else ""
    win += f"<p>{esc(forgetting_line(result))}</p>" if forgetting_line(result) else ""
    det = result["detoxify"]
    note = f"<p><i>{esc(result['baseline_note'])}</i></p>" if result["baseline_note"] else ""
    return (
        f"<html><body style='font-family:sans-serif'><h1>evaluate_llm: {verdict}</h1>"
        f"<p>Model root <code>{esc(result['model_root'])}</code>; Detoxify checkpoint "
        f"<code>{esc(det['checkpoint'])}</code> sha256 <code>{esc(det['sha256'])}</code></p>"
        f"<p><b>{esc(headline(result))}</b></p>{win}{note}"
        "<table border=1><tr><th>check</th><th>metric</th><th>value</th><th>baseline</th><th>bound</th>"
        f"<th>verdict</th><th>note</th></tr>{checks}</table>"
        f"<img alt='score histograms' src='data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}'/>"
        f"{tables}</body></html>"
    )
