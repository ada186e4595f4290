"""vLLM's own dashboards: the pinned table, index pages, the adaptation, and the controller fetch on a file index."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.action import vllm_dashboards as action
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import upstream_dashboards as ud
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import rules

MODEL = {
    "id": 7,
    "uid": "b281712d",
    "title": "vLLM",
    "tags": ["upstream"],
    "templating": {"list": [
        {"name": "DS_PROMETHEUS", "type": "datasource", "query": "prometheus", "current": {"value": "edx8"}},
        {"name": "model_name", "type": "query", "query": {"query": "label_values(model_name)"}},
    ]},
    "panels": [
        {"type": "timeseries", "targets": [{"expr": 'rate(vllm:generation_tokens_total{model_name="$model_name"}[5m])'}]},
        {"type": "row", "panels": [{"targets": [{"expr": "vllm:num_requests_running"}, {"expr": " "}]}]},
    ],
}


def test_every_verified_vllm_version_has_pinned_dashboards() -> None:
    """A new verified vLLM version (rules.VERIFIED) must bring its source archive's size and digest here."""
    assert set(rules.VERIFIED) <= set(ud.RELEASES)
    for version, rel in ud.RELEASES.items():
        assert rel.version == version and rel.sdist == f"vllm-{version}.tar.gz" and rel.top == f"vllm-{version}"
        assert len(rel.sha256) == 64 and rel.size > 1_000_000


def test_an_unknown_version_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ud.UpstreamDashboardError, match=r"0\.31\.0.*known: 0\.32\.0, 0\.33\.0.*enabled: false"):
        ud.release("0.31.0")


def test_fleet_versions_come_from_the_launch_records() -> None:
    hostvars = {
        "a": {"vllm_fleet_launch": {"image": {"vllm_version": "0.33.0"}}},
        "b": {"vllm_fleet_launch": {"image": {"vllm_version": "0.32.0"}}},
        "c": {"vllm_fleet_launch": {"image": {"vllm_version": "0.33.0"}}},
        "d": {},
    }
    assert ud.fleet_versions(["a", "b", "c", "d"], hostvars) == ["0.32.0", "0.33.0"]
    assert ud.fleet_versions(["d"], hostvars) == [rules.DEFAULT_VLLM_VERSION]
    assert ud.fleet_versions([], {}, default="0.32.0") == ["0.32.0"]


def test_sdist_url_from_json_and_html_index_pages() -> None:
    page = json.dumps({"files": [
        {"filename": "vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "url": "../../w/vllm.whl"},
        {"filename": "vllm-0.32.0.tar.gz", "url": "../../packages/ab/vllm-0.32.0.tar.gz#sha256=00"},
    ]})
    assert ud.sdist_url(page, "https://index.example/simple/vllm/", "vllm-0.32.0.tar.gz") == \
        "https://index.example/packages/ab/vllm-0.32.0.tar.gz"
    html = ('<html><body><a href="https://files.example/x/vllm-0.33.0.tar.gz#sha256=f4">vllm-0.33.0.tar.gz</a>'
            '<a href="../../y/vllm-0.32.0.tar.gz">vllm-0.32.0.tar.gz</a></body></html>')
    assert ud.sdist_url(html, "https://m.example/simple/vllm/", "vllm-0.33.0.tar.gz") == \
        "https://files.example/x/vllm-0.33.0.tar.gz"
    assert ud.sdist_url(html, "https://m.example/simple/vllm/", "vllm-0.32.0.tar.gz") == \
        "https://m.example/y/vllm-0.32.0.tar.gz"
    with pytest.raises(ud.UpstreamDashboardError, match=r"lists no vllm-0\.31\.0\.tar\.gz"):
        ud.sdist_url(html, "https://m.example/simple/vllm/", "vllm-0.31.0.tar.gz")


def test_adapt_points_the_dashboard_at_the_fleets_prometheus() -> None:
    rel = ud.release("0.32.0")
    out = ud.adapt(MODEL, rel, ud.DASHBOARDS[0], "prom-uid", "Prometheus (vllm-fleet)")
    assert out["uid"] == "vllm-0-32-0-overview" and out["title"] == "vLLM 0.32.0 overview"
    assert "id" not in out and out["tags"] == ["upstream", "vllm", "vllm-0.32.0"]
    assert "vllm-0.32.0.tar.gz" in out["description"] and rel.sha256[:12] in out["description"]
    datasource = out["templating"]["list"][0]
    assert datasource["current"] == {"selected": True, "text": "Prometheus (vllm-fleet)", "value": "prom-uid"}
    assert out["templating"]["list"][1] == MODEL["templating"]["list"][1]
    assert out["panels"] == MODEL["panels"]
    assert MODEL["id"] == 7 and MODEL["templating"]["list"][0]["current"] == {"value": "edx8"}  # input untouched
    assert ud.file_name(rel, ud.DASHBOARDS[1]) == "vllm-0.32.0-performance.json"
    assert len({ud.adapt(MODEL, r, d, "p", "P")["uid"] for r in ud.RELEASES.values() for d in ud.DASHBOARDS}) == 6


def test_queries_and_variables_include_nested_panels() -> None:
    assert ud.queries(MODEL) == ['rate(vllm:generation_tokens_total{model_name="$model_name"}[5m])',
                                 "vllm:num_requests_running"]
    assert ud.variables(MODEL) == ["DS_PROMETHEUS", "model_name"]


# ---- the controller step (action plugin) on a file:// index -----------------------------------------------------


def _archive(tmp_path: Path, version: str) -> tuple[Path, ud.Release]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for dashboard in ud.DASHBOARDS:
            data = json.dumps(dict(MODEL, title=dashboard.key)).encode()
            info = tarfile.TarInfo(f"vllm-{version}/{dashboard.member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    index = tmp_path / "index"
    (index / "vllm").mkdir(parents=True)
    sdist = index / "files" / f"vllm-{version}.tar.gz"
    sdist.parent.mkdir()
    sdist.write_bytes(buffer.getvalue())
    (index / "vllm" / "index.html").write_text(
        f'<a href="../files/vllm-{version}.tar.gz#sha256=x">vllm-{version}.tar.gz</a>')
    rel = ud.Release(version, f"vllm-{version}.tar.gz", len(buffer.getvalue()),
                     hashlib.sha256(buffer.getvalue()).hexdigest())
    return index, rel


def test_fetch_checks_the_digest_caches_and_reads_the_dashboards(tmp_path: Path) -> None:
    index, rel = _archive(tmp_path, "0.32.0")
    cache = tmp_path / "cache"
    missing = f"file://{tmp_path}/no-such-index"
    path, source = action.fetch_sdist(rel, str(cache), [missing, f"file://{index}"])
    assert path == str(cache / "vllm-0.32.0.tar.gz") and source == f"file://{index}/files/vllm-0.32.0.tar.gz"
    assert action.fetch_sdist(rel, str(cache), [missing]) == (path, "cache")  # no index needed any more
    models = action.read_dashboards(path, rel)
    assert sorted(models) == sorted(d.key for d in ud.DASHBOARDS) and models["queries"]["title"] == "queries"
    wrong = dataclasses.replace(rel, sha256="0" * 64)
    with pytest.raises(ud.UpstreamDashboardError, match=r"vllm-0\.32\.0\.tar\.gz from no configured index: .*pinned"):
        action.fetch_sdist(wrong, str(tmp_path / "other"), [f"file://{index}"])


def test_pip_indexes_read_pip_configuration(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf \"%s\\n\" \"global.cert='/etc/ca.crt'\" "
                    "\"global.extra-index-url='file:///a/simple file:///b/simple'\" "
                    "\":env:.index-url='https://mirror.invalid/simple'\"\n")
    fake.chmod(0o755)
    assert action.pip_indexes(str(fake)) == (
        ["https://mirror.invalid/simple", "file:///a/simple", "file:///b/simple"], "/etc/ca.crt")
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    indexes, cafile = action.pip_indexes(str(silent))
    assert len(indexes) == 1 and indexes[0].endswith("/simple") and cafile is None  # pip's own default
