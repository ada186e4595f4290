"""Fleet plan report rendering (plugins/plugin_utils/preflight/report.py)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import report as fr

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests/fixtures"
SVG_NS = "{http://www.w3.org/2000/svg}"


def load(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture()
def records() -> dict[str, dict[str, Any]]:
    gpu_plan = load(FIX / "preflight/plans/plan_h200x2_tp2.json")
    cpu_plan = load(FIX / "preflight/plans/plan_cpu.json")
    return {
        "h200-01": {"sku": "gpu_h200", "facts": load(ROOT / "inventories/example/recorded_facts/h200-01.json"),
                    "plan": gpu_plan, "multinode_group": None},
        "localhost": {"sku": "cpu_lane", "facts": load(FIX / "preflight/facts/cpu_host.json"), "plan": cpu_plan,
                      "multinode_group": None},
    }


def test_segments_fill_total(records: dict[str, dict[str, Any]]) -> None:
    plan = records["h200-01"]["plan"]
    segs = fr.memory_segments(plan)
    assert [s[0] for s in segs][:2] == ["weights", "activation"]
    assert sum(s[3] for s in segs) == pytest.approx(plan["memory_gib"]["total"])
    assert all(s[3] > 0 for s in segs)


def test_svg_is_valid_xml_with_one_rect_per_segment(records: dict[str, dict[str, Any]]) -> None:
    plan = records["h200-01"]["plan"]
    root = ET.fromstring(fr.memory_svg("h200-01", plan))
    assert root.tag == f"{SVG_NS}svg"
    segs = [r for r in root.iter(f"{SVG_NS}rect") if "seg" in (r.get("class") or "")]
    assert len(segs) == len(fr.memory_segments(plan))
    widths = [float(r.get("width") or 0) for r in segs]
    assert sum(widths) == pytest.approx(360, abs=0.1)
    kv = next(r for r in segs if "seg-kv_cache" in (r.get("class") or ""))
    kv_title = kv.find(f"{SVG_NS}title")
    assert kv_title is not None and f"{plan['memory_gib']['kv_cache']:.2f} GiB" in (kv_title.text or "")
    assert root.find(f"{SVG_NS}line") is not None  # the budget marker


def test_svg_escapes_host_names() -> None:
    svg = fr.memory_svg('a"<b>', {"memory_gib": {"total": 10, "weights": 5}})
    ET.fromstring(svg)
    assert '<b>' not in svg


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_one_row_per_host_with_chart_and_reasons(records: dict[str, dict[str, Any]]) -> None:
    page = fr.render_html(records)
    parser = _Collector()
    parser.feed(page)
    rows = [a for t, a in parser.tags if t == "tr" and (a.get("id") or "").startswith("host-")]
    assert [r["id"] for r in rows] == ["host-h200-01", "host-localhost"]
    assert sum(1 for t, a in parser.tags if t == "svg" and a.get("class") == "membar") == 2
    # Reasons on hover: the flag's title is its reason from the plan.
    reason = records["h200-01"]["plan"]["reasons"]["tensor-parallel-size"]
    flag_titles = [a.get("title") for t, a in parser.tags if t == "code" and a.get("class") == "flag"]
    assert reason in flag_titles
    # ... and below.
    text = " ".join(parser.text)
    assert reason in text
    assert "297,000" in text or f"{records['h200-01']['plan']['prediction']['kv_cache_tokens']:,}" in text
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_html_escapes_everything(records: dict[str, dict[str, Any]]) -> None:
    records["h200-01"]["plan"]["reasons"]["tensor-parallel-size"] = '<img src=x onerror="alert(1)">'
    page = fr.render_html(records)
    assert "<img" not in page


def test_markdown_references_svgs(records: dict[str, dict[str, Any]]) -> None:
    md = fr.render_markdown(records)
    assert "![memory of h200-01](memory/h200-01.svg)" in md
    assert md.count("\n| ") >= 3
    assert "--tensor-parallel-size 2" in md


def test_summary_lines_aligned(records: dict[str, dict[str, Any]]) -> None:
    lines = fr.summary_lines(records)
    assert len(lines) == 3  # header + one row per host; no warning line when every version is verified
    assert lines[0].split()[:4] == ["host", "sku", "gpus", "vllm"]
    assert lines[1].startswith("h200-01") and "2x NVIDIA H200" in lines[1]
    assert "CPU lane" in lines[2]
    col = lines[0].index("sku")
    assert all(line[col - 2:col] == "  " for line in lines)


def test_unverified_version_is_loud_in_every_view(records: dict[str, dict[str, Any]]) -> None:
    """A plan past the newest verified vLLM: a banner in the page and the Markdown, a flagged row and a !! line in
    the preflight summary (the plan's own warning is listed with the host's reasons too)."""
    records["h200-01"]["plan"]["vllm_version"] = "0.99.0"
    records["h200-01"]["plan"]["warnings"] = ["UNVERIFIED: vLLM 0.99.0 is newer than 0.33.0, ..."]
    lines = fr.summary_lines(records)
    assert "0.99.0 !" in lines[1]
    assert lines[-1].startswith("!! UNVERIFIED vLLM 0.99.0 on h200-01: planned with 0.33.0's rules")
    page = fr.render_html(records)
    parser = _Collector()
    parser.feed(page)
    assert any(t == "p" and a.get("id") == "unverified" for t, a in parser.tags)
    assert page.index('id="unverified"') < page.index('id="fleet"')  # above the table
    assert "UNVERIFIED: vLLM 0.99.0 is newer than 0.33.0" in page      # and in the host's warnings
    md = fr.render_markdown(records)
    assert md.splitlines()[2].startswith("> **UNVERIFIED vLLM 0.99.0 on h200-01")
    assert fr.unverified_hosts(records) == {"0.99.0": ["h200-01"]}
    records["h200-01"]["plan"]["vllm_version"] = "0.33.0"
    assert fr.unverified_lines(records) == [] and 'id="unverified"' not in fr.render_html(records)


def test_deterministic(records: dict[str, dict[str, Any]]) -> None:
    assert fr.render_html(records) == fr.render_html(dict(reversed(list(records.items()))))
    assert not re.search(r"20\d\d-\d\d-\d\d", fr.render_html(records))


def test_missing_fields_do_not_crash() -> None:
    page = fr.render_html({"x": {"plan": {}, "facts": {}}})
    assert "host-x" in page and "–" in page


def test_summary_names_the_data_parallel_size_whose_ranks_the_kv_figures_are_per(
        records: dict[str, dict[str, Any]]) -> None:
    records["h200-01"]["plan"]["parallel"] = {**records["h200-01"]["plan"]["parallel"], "data_parallel_size": 16,
                                              "tensor_parallel_size": 1}
    lines = fr.summary_lines(records)
    assert "  1x1 dp16  " in lines[1]
    assert " dp" not in lines[2]
