"""Fleet plan report: HTML page, Markdown and a per-host memory bar chart (inline SVG).

Pure Python, stdlib only, no I/O: every function returns a string; ``playbooks/preflight.yml`` writes them
under the controller's artifacts folder. Output is deterministic (no timestamps), so re-running the
preflight on an unchanged fleet rewrites nothing.

Input: ``records`` maps host → {"sku": str, "facts": CONTRACT 1, "plan": CONTRACT 2, "multinode_group": str}.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    NEWEST_VERIFIED_VERSION,
    rules_for,
)

#: Memory components drawn in the bar, in order, with their colours and labels (CONTRACT 2 memory_gib).
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("weights", "#4e79a7", "weights"),
    ("activation", "#f28e2b", "activation peak"),
    ("non_torch", "#b07aa1", "non-torch (CUDA ctx, NCCL)"),
    ("cuda_graph", "#e15759", "CUDA graphs"),
    ("kv_cache", "#59a14f", "KV cache"),
    ("headroom", "#bab0ac", "outside budget"),
)

_BAR_W = 360
_BAR_H = 22


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if value > 0 else 0.0


def _fmt_int(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–"
    return f"{int(value):,}"


def _fmt_float(value: Any, digits: int = 1) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–"
    return f"{float(value):.{digits}f}"


def memory_segments(plan: Mapping[str, Any]) -> list[tuple[str, str, str, float]]:
    """(key, colour, label, GiB) for each non-zero component of the per-GPU memory breakdown.

    The bar's full width is ``memory_gib.total``; ``headroom`` is what is left of the total outside the
    drawn components (never negative).
    """
    mem = plan.get("memory_gib") or {}
    out: list[tuple[str, str, str, float]] = []
    used = 0.0
    for key, colour, label in SEGMENTS:
        if key == "headroom":
            continue
        gib = _num(mem.get(key))
        if gib > 0:
            out.append((key, colour, label, gib))
            used += gib
    total = _num(mem.get("total"))
    rest = total - used if total > used else _num(mem.get("headroom"))
    if rest > 0:
        out.append(("headroom", SEGMENTS[-1][1], SEGMENTS[-1][2], rest))
    return out


def memory_svg(host: str, plan: Mapping[str, Any]) -> str:
    """A stacked horizontal bar (per GPU, GiB) with a budget marker; each segment has a hover title."""
    segs = memory_segments(plan)
    mem = plan.get("memory_gib") or {}
    total = _num(mem.get("total")) or sum(s[3] for s in segs) or 1.0
    scale = _BAR_W / max(total, sum(s[3] for s in segs), 1e-9)
    device = "GPU" if plan.get("device", "cuda") != "cpu" else "CPU KV space"
    title = f"{host}: memory per {device}, {total:.1f} GiB"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="membar" width="{_BAR_W + 2}" height="{_BAR_H + 18}" '
        f'viewBox="0 0 {_BAR_W + 2} {_BAR_H + 18}" role="img" aria-label="{html.escape(title)}" '
        f'data-host="{html.escape(host)}">',
        f"<title>{html.escape(title)}</title>",
        f'<rect x="1" y="1" width="{_BAR_W}" height="{_BAR_H}" fill="#f4f4f4" stroke="#999"/>',
    ]
    x = 1.0
    for key, colour, label, gib in segs:
        w = gib * scale
        parts.append(
            f'<rect class="seg seg-{key}" x="{x:.2f}" y="1" width="{w:.2f}" height="{_BAR_H}" fill="{colour}">'
            f"<title>{html.escape(label)}: {gib:.2f} GiB</title></rect>"
        )
        x += w
    budget = _num(mem.get("budget"))
    if budget > 0:
        bx = 1 + budget * scale
        parts.append(f'<line class="budget" x1="{bx:.2f}" y1="0" x2="{bx:.2f}" y2="{_BAR_H + 2}" '
                     f'stroke="#000" stroke-width="2"><title>budget (gpu_memory_utilization): '
                     f"{budget:.2f} GiB</title></line>")
    kv = _num(mem.get("kv_cache"))
    parts.append(f'<text x="1" y="{_BAR_H + 15}" font-size="11" font-family="sans-serif">'
                 f"{total:.1f} GiB total, KV {kv:.1f} GiB</text>")
    parts.append("</svg>")
    return "".join(parts)


def _gpus(facts: Mapping[str, Any]) -> str:
    count = facts.get("gpu_count") or 0
    if not count:
        host = facts.get("host") or {}
        return f"CPU lane ({host.get('cpu_cores', '?')} cores)"
    link = facts.get("interconnect") or "single"
    return f"{count}x {facts.get('gpu_name') or 'mixed'} ({link})"


def observed_cell(feedback: Any) -> str:
    """The "observed" cell from a plan-feedback report (``artifacts/feedback/<host>.json``, written after a
    deploy by ``plugins/plugin_utils/observe/feedback.py``): vLLM's logged KV tokens per replica and the error
    against the prediction, ``!`` when beyond the report's tolerance; ``–`` without a report."""
    if not isinstance(feedback, Mapping) or not feedback.get("replicas"):
        return "–"
    cells = []
    for rep in feedback["replicas"]:
        obs = (rep.get("observed") or {}).get("kv_cache_tokens")
        err = (rep.get("error") or {}).get("kv_cache_tokens")
        if obs is None:
            cells.append("no log line !")
            continue
        text = _fmt_int(obs)
        if isinstance(err, (int, float)) and not isinstance(err, bool):
            text += f" ({err:+.1%})"
        cells.append(text + (" !" if rep.get("status") != "ok" else ""))
    return "; ".join(cells)


def unverified_hosts(records: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """vLLM version → the hosts whose plan targets it, for versions newer than the newest verified release (planned
    with that release's rules: the planner's first warning says so)."""
    found: dict[str, list[str]] = {}
    for host in sorted(records):
        version = str((records[host].get("plan") or {}).get("vllm_version") or "")
        try:
            unverified = bool(version) and rules_for(version).unverified
        except ValueError:
            continue
        if unverified:
            found.setdefault(version, []).append(host)
    return found


def unverified_lines(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One loud line per unverified version ([] when every plan targets a verified release)."""
    return [f"UNVERIFIED vLLM {version} on {', '.join(hosts)}: planned with {NEWEST_VERIFIED_VERSION}'s rules, "
            "which this release may no longer follow; check its release notes or add its rules "
            "(docs/vllm-versions.md) before deploying"
            for version, hosts in unverified_hosts(records).items()]


def _row_data(host: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    plan = rec.get("plan") or {}
    facts = rec.get("facts") or {}
    pred = plan.get("prediction") or {}
    par = plan.get("parallel") or {}
    return {
        "host": host,
        "sku": rec.get("sku") or "",
        "gpus": _gpus(facts),
        "device": plan.get("device", ""),
        "vllm": str(plan.get("vllm_version") or "–"),
        "dp": par.get("data_parallel_size", 1),
        "tp": par.get("tensor_parallel_size", 1),
        "pp": par.get("pipeline_parallel_size", 1),
        "nodes": par.get("nodes", 1),
        "replicas": par.get("replicas", 1),
        "group": rec.get("multinode_group") or "",
        "kv_tokens": pred.get("kv_cache_tokens"),
        "observed": observed_cell(rec.get("feedback")) if rec.get("feedback") else None,
        "concurrency": pred.get("max_concurrency"),
        "max_model_len": pred.get("max_model_len"),
        "cli_args": [str(a) for a in plan.get("cli_args") or []],
        "reasons": {str(k): str(v) for k, v in (plan.get("reasons") or {}).items()},
        "warnings": [str(w) for w in plan.get("warnings") or []],
    }


def _flag_pairs(cli_args: list[str]) -> list[tuple[str, str | None]]:
    """Group ``--flag value`` pairs: [("--tensor-parallel-size", "2"), ("--enforce-eager", None)]."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(cli_args):
        arg = cli_args[i]
        if arg.startswith("-") and i + 1 < len(cli_args) and not cli_args[i + 1].startswith("--"):
            pairs.append((arg, cli_args[i + 1]))
            i += 2
        else:
            pairs.append((arg, None))
            i += 1
    return pairs


def _reason_for(flag: str, reasons: Mapping[str, str]) -> str:
    key = flag.lstrip("-").split("=", 1)[0]
    return reasons.get(key) or reasons.get(key.replace("-", "_")) or ""


_CSS = """
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}
th,td{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left;font-size:13px}
th{background:#eee}
td:first-child{white-space:nowrap}
code.flag{display:inline-block;background:#f6f8fa;border:1px solid #ddd;border-radius:3px;margin:1px;
padding:0 3px;cursor:help}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
.warn{color:#a05a00}
.unverified{background:#b00020;color:#fff;font-weight:bold;padding:8px 10px;margin:0.6em 0}
section.host{margin-top:1.2em}
"""


def render_html(records: Mapping[str, Mapping[str, Any]], title: str = "vllm-fleet plan") -> str:
    """The fleet plan as one self-contained HTML page (inline CSS and SVG, no scripts, no network)."""
    esc = html.escape
    rows = [_row_data(h, records[h]) for h in sorted(records)]
    observed = any(r["observed"] is not None for r in rows)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p id="summary">{len(rows)} host(s); '
        f"{sum(1 for r in rows if r['device'] == 'cuda')} GPU, "
        f"{sum(1 for r in rows if r['device'] == 'cpu')} CPU lane. Hover a flag for its reason; "
        "reasons and warnings are listed per host below.</p>",
        *(f'<p class="unverified" id="unverified">{esc(line)}</p>' for line in unverified_lines(records)),
        '<div class="legend">' + "".join(
            f'<span><i style="background:{c}"></i>{esc(label)}</span>' for _key, c, label in SEGMENTS)
        + '<span><i style="background:#000;width:2px"></i>budget</span></div>',
        '<table id="fleet"><thead><tr><th>Host</th><th>SKU</th><th>GPUs</th><th>vLLM</th><th>Parallel</th><th>Flags</th>'
        "<th>KV tokens</th>" + ("<th>Observed KV tokens (error)</th>" if observed else "")
        + "<th>Max concurrency</th><th>Max model len</th><th>Memory per GPU (GiB)</th>"
        "</tr></thead><tbody>",
    ]
    for row, host in zip(rows, sorted(records), strict=True):
        flags = "".join(
            f'<code class="flag" title="{esc(_reason_for(f, row["reasons"]))}">'
            f"{esc(f)}{(' ' + esc(v)) if v is not None else ''}</code> "
            for f, v in _flag_pairs(row["cli_args"])
        )
        parallel = (f"DP{row['dp']} x " if row["dp"] != 1 else "") + f"TP{row['tp']} x PP{row['pp']}"
        if row["nodes"] and row["nodes"] != 1:
            parallel += f" over {row['nodes']} nodes ({esc(row['group'])})"
        if row["replicas"] and row["replicas"] != 1:
            parallel += f", {row['replicas']} replicas"
        out.append(
            f'<tr id="host-{esc(host)}"><td><a href="#detail-{esc(host)}">{esc(host)}</a></td>'
            f"<td>{esc(row['sku'])}</td><td>{esc(row['gpus'])}</td><td>{esc(row['vllm'])}</td><td>{parallel}</td>"
            f"<td>{flags}</td>"
            f'<td class="num">{_fmt_int(row["kv_tokens"])}</td>'
            + (f'<td class="num">{esc(row["observed"] or "–")}</td>' if observed else "")
            + f'<td class="num">{_fmt_float(row["concurrency"])}</td>'
            f'<td class="num">{_fmt_int(row["max_model_len"])}</td>'
            f"<td>{memory_svg(host, records[host].get('plan') or {})}</td></tr>"
        )
    out.append("</tbody></table><h2>Reasons and warnings</h2>")
    for row in rows:
        host = row["host"]
        out.append(f'<section class="host" id="detail-{esc(host)}"><h3>{esc(host)}</h3><ul>')
        for key in sorted(row["reasons"]):
            out.append(f"<li><code>{esc(key)}</code>: {esc(row['reasons'][key])}</li>")
        out.append("</ul>")
        if row["warnings"]:
            out.append('<ul class="warn">' + "".join(f"<li>{esc(w)}</li>" for w in row["warnings"]) + "</ul>")
        out.append("</section>")
    out.append("</body></html>\n")
    return "\n".join(out)


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(records: Mapping[str, Mapping[str, Any]], title: str = "vllm-fleet plan",
                    svg_dir: str = "memory") -> str:
    """The fleet plan as Markdown; charts are referenced as ``<svg_dir>/<host>.svg`` (written alongside)."""
    rows = [_row_data(h, records[h]) for h in sorted(records)]
    observed = any(r["observed"] is not None for r in rows)
    out = [f"# {title}", ""]
    out += [f"> **{_md(line)}**\n" for line in unverified_lines(records)]
    out += ["| Host | SKU | GPUs | vLLM | TP x PP (nodes) | KV tokens | "
            + ("Observed KV tokens (error) | " if observed else "") + "Max concurrency | Max model len | Memory |",
            "|---|---|---|---|---|---:|" + ("---:|" if observed else "") + "---:|---:|---|"]
    for r in rows:
        obs_cell = f" {_md(r['observed'] or '–')} |" if observed else ""
        out.append(
            f"| {_md(r['host'])} | {_md(r['sku'])} | {_md(r['gpus'])} | {_md(r['vllm'])} "
            f"| {r['tp']} x {r['pp']} ({r['nodes']}) "
            f"| {_fmt_int(r['kv_tokens'])} |{obs_cell} {_fmt_float(r['concurrency'])} | {_fmt_int(r['max_model_len'])} "
            f"| ![memory of {_md(r['host'])}]({svg_dir}/{r['host']}.svg) |"
        )
    out.append("")
    for r in rows:
        out += [f"## {r['host']}", "", "```", " ".join(r["cli_args"]), "```", ""]
        out += [f"- `{k}`: {_md(v)}" for k, v in sorted(r["reasons"].items())]
        out += [f"- **warning**: {_md(w)}" for w in r["warnings"]]
        out.append("")
    return "\n".join(out)


def _layout(row: Mapping[str, Any]) -> str:
    """``8x2``, or ``1x1 dp16`` under data parallelism (the KV figures are then per data-parallel rank)."""
    return f"{row['tp']}x{row['pp']}" + (f" dp{row['dp']}" if row["dp"] > 1 else "")


def summary_lines(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A short fixed-width table for the end of the play (one row per host), then one ``!!`` line per vLLM version
    newer than the newest verified release (its hosts are marked ``!`` in the table)."""
    header = ("host", "sku", "gpus", "vllm", "tp x pp", "kv tokens", "conc")
    rows = [header]
    flagged = {h for hosts in unverified_hosts(records).values() for h in hosts}
    for h in sorted(records):
        r = _row_data(h, records[h])
        rows.append((h, r["sku"], r["gpus"], r["vllm"] + (" !" if h in flagged else ""), _layout(r),
                     _fmt_int(r["kv_tokens"]), _fmt_float(r["concurrency"])))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    table = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return table + [f"!! {line}" for line in unverified_lines(records)]
