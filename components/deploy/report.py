"""The deployment report: a timeline image (traffic, error rate and latency per interval,
canary against stable) and an HTML page readable in the Kubeflow UI."""

from __future__ import annotations

import base64
import html
import io


def timeline_png(record: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    reqs = record.get("requests", [])
    ivs = record.get("intervals", [])
    xs = [iv["start_s"] for iv in ivs] + ([ivs[-1]["start_s"] + max(ivs[-1]["seconds"], 0.1)] if ivs else [])
    axes[0].step(
        xs, [iv["percent"] for iv in ivs] + ([ivs[-1]["percent"]] if ivs else []), where="post", color="tab:orange"
    )
    axes[0].set_ylabel("canary traffic %")
    axes[0].set_ylim(-5, 105)
    for role, color in (("stable", "tab:blue"), ("canary", "tab:orange")):
        mids = [iv["start_s"] + iv["seconds"] / 2 for iv in ivs]
        axes[1].plot(mids, [iv[role]["error_rate"] for iv in ivs], "o-", color=color, label=role)
        pts = [(r["t"], r["latency_ms"]) for r in reqs if r["backend"] == role and r["ok"]]
        if pts:
            axes[2].scatter(*zip(*pts, strict=False), s=4, alpha=0.4, color=color, label=f"{role} requests")
        axes[2].plot(mids, [iv[role]["p99_ms"] for iv in ivs], "s-", color=color, lw=2, label=f"{role} p99")
    bad = [r["t"] for r in reqs if not r["ok"]]
    if bad:
        axes[1].plot(bad, [0] * len(bad), "x", color="tab:red", label="failed request")
    axes[1].set_ylabel("error rate")
    axes[2].set_ylabel("latency ms")
    axes[2].set_xlabel("seconds since rollout start")
    for ax in axes[1:]:
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{record.get('model_name', '')} v{record.get('version', '')}: {record['decision']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _fmt(v) -> str:
    if isinstance(v, float):
        return "n/a" if v != v else f"{v:.4g}"
    return html.escape(str(v))


def _token_cells(stats: dict) -> str:
    tokens = stats.get("tokens") or {}
    return "".join(
        f"<td>{_fmt(tokens[k]['p50_ms'])} / {_fmt(tokens[k]['p95_ms'])}</td>" if tokens.get(k) else "<td>n/a</td>"
        for k in ("ttft", "itl")
    )


def render_html(record: dict, png: bytes) -> str:
    rows = []
    for iv in record["intervals"]:
        failed = [
            f"{c['metric']} {_fmt(c['value'])} (needs {c['bound']}) {c['reason']}".strip()
            for c in iv["checks"]
            if c["verdict"] == "fail"
        ]
        tok = {role: _token_cells(iv[role]) for role in ("canary", "stable")}
        rows.append(
            f"<tr><td>{iv['interval']}</td><td>{iv['percent']}</td><td>{iv['canary']['requests']}</td>"
            f"<td>{_fmt(iv['canary']['error_rate'])}</td><td>{_fmt(iv['canary']['p99_ms'])}</td>{tok['canary']}"
            f"<td>{iv['stable']['requests']}</td><td>{_fmt(iv['stable']['error_rate'])}</td>"
            f"<td>{_fmt(iv['stable']['p99_ms'])}</td>{tok['stable']}<td>{iv['action']}</td>"
            f"<td>{html.escape('; '.join(failed))}</td></tr>"
        )
    iface = "".join(
        f"<li>{'BREAKING ' if d['breaking'] else ''}{html.escape(d['what'])}</li>" for d in record["interface"]
    )
    smoke = "".join(
        f"<li>interval {s['interval']}: {'pass' if s['passed'] else 'FAIL'} "
        + html.escape(", ".join(f"{c['metric']} {c['reason']}" for c in s["checks"] if c["reason"]))
        + "</li>"
        for s in record["smoke"]
    )
    facts = [
        ("decision", record["decision"]),
        ("reason", record["reason"]),
        ("model", record.get("model_name")),
        ("version", record.get("version")),
        ("previous stable", record.get("stable_version") or "none"),
        ("repository root", record.get("repository_root")),
        ("model root (blessed)", record.get("model_root")),
        ("target", record.get("target")),
        ("seconds", record.get("seconds")),
    ]
    return (
        "<!doctype html><meta charset='utf-8'><title>triton_canary_deploy</title>"
        "<style>body{font-family:sans-serif;max-width:1000px}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse;font-size:13px}</style>"
        f"<h1>Canary: {html.escape(str(record['decision']))}</h1><table>"
        + "".join(f"<tr><th>{k}</th><td><code>{_fmt(v)}</code></td></tr>" for k, v in facts)
        + "</table>"
        f"<h2>Timeline</h2><img src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        "<h2>Intervals</h2><p>TTFT: time to first token, ITL: inter-token latency, p50/p95 ms from the "
        "servers' histograms over the interval.</p><table><tr><th>#</th><th>canary %</th><th>canary req</th>"
        "<th>canary err</th><th>canary p99 ms</th><th>canary TTFT</th><th>canary ITL</th><th>stable req</th>"
        "<th>stable err</th><th>stable p99 ms</th><th>stable TTFT</th><th>stable ITL</th><th>action</th>"
        "<th>failed checks</th></tr>" + "".join(rows) + "</table>"
        f"<h2>Interface vs stable</h2><ul>{iface or '<li>identical (or first release)</li>'}</ul>"
        f"<h2>Smoke tests (X-Canary: always)</h2><ul>{smoke}</ul>"
    )
