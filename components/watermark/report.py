"""The watermark report: the gate, the z-score distributions of watermarked and
unwatermarked text as one SVG image, and a few texts with their green tokens highlighted."""

from __future__ import annotations

import base64
import html


def z_histogram_svg(
    marked: list[float], plain: list[float], threshold: float, width: int = 640, height: int = 240
) -> str:
    values = [z for z in marked + plain if z == z]
    lo, hi = min(values + [-4.0]), max(values + [threshold + 2])
    bins = 40
    step = (hi - lo) / bins
    left, base, plot_w, plot_h = 40, height - 30, width - 60, height - 60

    def counts(zs):
        out = [0] * bins
        for z in zs:
            if z == z:
                out[min(bins - 1, int((z - lo) / step))] += 1
        return out

    cm, cp = counts(marked), counts(plain)
    top = max(cm + cp) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">z-scores: watermarked (green) vs '
        f"unwatermarked (grey)</text>",
        f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#333"/>',
    ]
    for series, color in ((cp, "#999999"), (cm, "#2ca02c")):
        for i, c in enumerate(series):
            h = c / top * plot_h
            parts.append(
                f'<rect x="{left + i * plot_w / bins:.1f}" y="{base - h:.1f}" width="{plot_w / bins - 1:.1f}" '
                f'height="{h:.1f}" fill="{color}" fill-opacity="0.7"/>'
            )
    tx = left + (threshold - lo) / (hi - lo) * plot_w
    parts += [
        f'<line x1="{tx:.1f}" y1="{base}" x2="{tx:.1f}" y2="{base - plot_h}" stroke="#d62728" stroke-dasharray="4"/>',
        f'<text x="{tx:.1f}" y="{base + 16}" font-size="11" text-anchor="middle">z = {threshold:g}</text>',
        f'<text x="{left}" y="{base + 16}" font-size="11" text-anchor="middle">{lo:.1f}</text>',
        f'<text x="{left + plot_w}" y="{base + 16}" font-size="11" text-anchor="middle">{hi:.1f}</text>',
        "</svg>",
    ]
    return "".join(parts)


def quality_line(metrics: dict) -> str:
    """The watermark's cost to the answers, in words."""
    if "exact_match_cost" not in metrics:
        return ""
    return (
        f"Quality cost: the eval prompts answered greedily match the reference exactly "
        f"{metrics['exact_match_unwatermarked']:.1%} of the time without the watermark and "
        f"{metrics['exact_match_watermarked']:.1%} with it (cost {metrics['exact_match_cost']:.1%}); "
        f"their perplexity goes from {metrics['perplexity_unwatermarked']:.3g} to "
        f"{metrics['perplexity_watermarked']:.3g} ({metrics['perplexity_increase']:+.1%}) and their BERTScore F1 "
        f"from {metrics['bertscore_f1_unwatermarked']:.3f} to {metrics['bertscore_f1_watermarked']:.3f} "
        f"(cost {metrics['bertscore_cost']:.3f}); judged pair by pair, the watermarked answer wins "
        f"{metrics['judge_win_rate']:.3f} (interval {metrics['judge_win_rate_lower']:.3f}–"
        f"{metrics['judge_win_rate_upper']:.3f}; 0.5: no loss)."
    )


def _tradeoff_html(curve: list[dict], chosen: float) -> str:
    if not curve:
        return ""
    rows = "".join(
        f"<tr><td>{p['delta']:g}{' (this config)' if p['delta'] == chosen else ''}</td><td>{p['tpr']:.3f}</td>"
        f"<td>{p['exact_match']:.1%}</td><td>{p['exact_match_cost']:.1%}</td>"
        f"<td>{p['perplexity']:.3g}</td><td>{p['perplexity_increase']:+.1%}</td>"
        f"<td>{p['bertscore_f1']:.3f}</td><td>{p['bertscore_cost']:.3f}</td>"
        f"<td>{p['judge_win_rate']:.3f}</td></tr>"
        for p in curve
    )
    return (
        "<h2>Detection against quality, by delta</h2><table border=1><tr><th>delta</th><th>TPR</th>"
        "<th>exact match with the watermark</th><th>its cost</th><th>perplexity</th><th>its rise</th>"
        f"<th>BERTScore F1</th><th>its cost</th><th>judge's win rate</th></tr>{rows}</table>"
    )


def _schemes_html(result: dict) -> str:
    rows = result.get("schemes") or []
    if len(rows) < 2:
        return ""
    kgw = result["kgw"]
    body = "".join(
        f"<tr><td>{r['scheme']}{' (served)' if r['scheme'] == kgw['scheme'] else ''}</td>"
        f"<td>{r['tpr']:.3f}</td><td>{r['fpr']:.3f}</td><td>{r['mean_z_watermarked']:.2f}</td>"
        f"<td>{r['text_perplexity']:.3g}</td><td>{r['text_perplexity_increase']:+.1%}</td>"
        f"<td>{r['text_repetition']:.3f} (unwatermarked "
        f"{result['metrics']['text_repetition_unwatermarked']:.3f})</td></tr>"
        for r in rows
    )
    return (
        f"<h2>Schemes at gamma {kgw['gamma']:g}, delta {kgw['delta']:g}, z {kgw['z_threshold']:g}</h2>"
        "<table border=1><tr><th>scheme</th><th>TPR</th><th>FPR</th><th>mean z (watermarked)</th>"
        f"<th>texts' perplexity under the oracle</th><th>its rise</th>"
        f"<th>repeated 3-grams (low perplexity from loops is not quality)</th></tr>{body}</table>"
    )


def render_html(result: dict, svg: str) -> str:
    esc = html.escape
    verdict = "VERIFIED" if result["verified"] else "NOT VERIFIED"
    checks = "".join(
        f"<tr><td>{esc(c['metric'])}</td><td>{c['value']:.4g}</td><td>{esc(c['bound'])}</td>"
        f"<td><b>{c['verdict'].upper()}</b></td></tr>"
        for c in result["checks"]
    )
    metrics = "".join(f"<tr><td>{esc(k)}</td><td>{v:.4g}</td></tr>" for k, v in result["metrics"].items())
    texts = ""
    for tokens in result["highlights"]:
        spans = "".join(
            f"<span style='background:{'#b7f5b7' if g else ('#f5c6c6' if g is False else '#eee')}'>{esc(t)}</span>"
            for t, g in tokens
        )
        texts += f"<p style='font-family:monospace'>{spans}</p>"
    return (
        f"<html><body style='font-family:sans-serif'><h1>verify_watermark: {verdict}</h1>"
        f"<p>Scheme {esc(result['kgw']['scheme'])}, gamma {result['kgw']['gamma']}, delta {result['kgw']['delta']}, "
        f"z threshold {result['kgw']['z_threshold']}; model root "
        f"<code>{esc(result['model_root'])}</code></p>"
        f"<p>Detection: {esc(result.get('detection', ''))}.</p>"
        f"<p><b>{esc(quality_line(result['metrics']))}</b></p>"
        f"<table border=1><tr><th>check</th><th>value</th><th>bound</th><th>verdict</th></tr>{checks}</table>"
        f"<img alt='z-score distributions' src='data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}'/>"
        f"{_tradeoff_html(result.get('tradeoff') or [], result['kgw']['delta'])}{_schemes_html(result)}"
        f"<h2>Metrics</h2><table border=1>{metrics}</table>"
        f"<h2>Watermarked texts (green tokens highlighted)</h2>{texts}</body></html>"
    )
