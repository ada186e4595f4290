"""A real Prometheus 2.42 scrapes a real vLLM (CPU build, tiny model) and evaluates the role's rules.

Proves, against the live series rather than a list of names:
- a PromQL query through Prometheus' HTTP API returns `vllm:` series with the scrape job's `host` label;
- every alert rule evaluates without error on the real data (rule health "ok");
- every dashboard query references only series present in the real /metrics (DCGM names aside: no GPU
  here) and returns data through Prometheus;
- every query of vLLM's own dashboards for 0.32.0 (read out of the release's source archive on the package index,
  as the monitoring role's vllm_dashboards step reads them) references only series the real server exports and
  evaluates through Prometheus, its Grafana variables set the way Grafana would.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.vllm_fleet.fleet.plugins.action import vllm_dashboards as upstream_action  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import monitoring as mr  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import upstream_dashboards as ud  # noqa: E402

from tests.integration._helpers import free_port, running_prometheus  # noqa: E402

pytestmark = pytest.mark.integration
PROM_PORTS = range(18490, 18500)  # MONITORING's range; 19090 is the molecule scenario's


def _get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = _get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(1)


def _metric_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


@pytest.fixture(scope="module")
def prometheus(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    workdir = tmp_path_factory.mktemp("prometheus")
    (workdir / "vllm-fleet.rules.yml").write_text(
        yaml.safe_dump(mr.alert_rules(), sort_keys=False, width=1000)
    )
    jobs = mr.scrape_configs(
        [{"host": "local", "address": "127.0.0.1", "vllm_ports": [vllm_server.port], "node_exporter": False}],
        scrape_interval="1s",
    )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(workdir / "vllm-fleet.rules.yml")],
        "scrape_configs": jobs,
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port(PROM_PORTS)
    with running_prometheus(workdir, port) as url:
        yield Prometheus(url)


@pytest.fixture(scope="module")
def traffic(vllm_server: Any, prometheus: Prometheus) -> None:
    """A few real completions, spread over several scrapes so that rate() and histograms have data."""
    for i in range(6):
        vllm_server.post_json(
            "/v1/completions",
            {"model": vllm_server.model, "prompt": f"hello number {i}", "max_tokens": 8, "temperature": 0},
        )
        time.sleep(0.7)
    time.sleep(3)


def test_promql_returns_real_vllm_series(prometheus: Prometheus, traffic: None) -> None:
    up = prometheus.wait_for('up{job="vllm", host="local"} == 1')
    assert len(up) == 1
    tokens = prometheus.wait_for('vllm:generation_tokens_total{host="local"} > 0')
    assert tokens, "no vllm:generation_tokens_total with a positive value"
    labels = tokens[0]["metric"]
    assert labels["job"] == "vllm" and labels["model_name"] == "tiny"
    assert float(tokens[0]["value"][1]) >= 6 * 8 * 0.5  # the completions generated up to 48 tokens
    series = prometheus.query('{__name__=~"vllm:.+", host="local"}')
    names = {s["metric"]["__name__"] for s in series}
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"} <= names


def test_every_rule_evaluates_on_real_data(prometheus: Prometheus, traffic: None) -> None:
    time.sleep(2)  # at least one evaluation after the traffic
    groups = _get(f"{prometheus.url}/api/v1/rules")["data"]["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert set(rules) == set(mr.RUNBOOKS)
    for name, rule in rules.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
    # A healthy, idle tiny server: the endpoint is up, nothing saturated.
    assert rules["VllmEndpointDown"]["state"] == "inactive"
    assert rules["VllmKvCacheSaturated"]["state"] == "inactive"


def test_alert_and_dashboard_series_exist_in_real_metrics(vllm_server: Any, traffic: None) -> None:
    status, text = vllm_server.get("/metrics")
    assert status == 200
    real = _metric_names(text)
    used: set[str] = set()
    for expr in [*mr.alert_expressions().values(), *mr.dashboard_queries(mr.dashboard())]:
        used |= mr.series_names(expr)
    vllm_used = {n for n in used if n.startswith("vllm:")}
    assert vllm_used, "no vllm: series referenced"
    missing = vllm_used - real
    assert not missing, f"referenced but not exported by vLLM: {sorted(missing)}"


def test_every_vllm_dashboard_query_returns_data(prometheus: Prometheus, traffic: None) -> None:
    for expr in mr.dashboard_queries(mr.dashboard()):
        names = mr.series_names(expr)
        if any(n.startswith("DCGM_") for n in names):
            continue  # no GPU, no DCGM exporter on this machine
        assert prometheus.query(expr), f"dashboard query returned nothing: {expr}"


@pytest.fixture(scope="module")
def vllm_dashboards() -> dict[str, dict[str, Any]]:
    """vLLM 0.32.0's own dashboards, fetched and checked as the monitoring role's vllm_dashboards step does it."""
    rel = ud.release("0.32.0")
    indexes, cafile = upstream_action.pip_indexes()
    path, _source = upstream_action.fetch_sdist(rel, "~/.cache/vllm-fleet/vllm-sdist", indexes, cafile)
    return upstream_action.read_dashboards(path, rel)


def _as_grafana_sends(expr: str, model_name: str) -> str:
    """A dashboard query with Grafana's variables set: the model variable to the served model, the intervals."""
    expr = re.sub(r"\$\{?(model_name|Deployment_id)\}?", re.escape(model_name), expr)
    for name, value in (("__rate_interval", "1m"), ("__interval", "15s"), ("__range", "5m")):
        expr = re.sub(r"\$\{?" + name + r"\}?", value, expr)
    assert "$" not in expr, f"a Grafana variable left in {expr}"
    return expr


def test_vllms_own_dashboards_query_real_series(
    vllm_server: Any, prometheus: Prometheus, traffic: None, vllm_dashboards: dict[str, dict[str, Any]]
) -> None:
    status, text = vllm_server.get("/metrics")
    assert status == 200
    real = _metric_names(text)
    answered = total = 0
    for key, model in vllm_dashboards.items():
        exprs = ud.queries(model)
        assert exprs, f"{key}: no queries"
        for expr in exprs:
            names = {n for n in mr.series_names(expr) if n.startswith("vllm:")}
            assert names, f"{key}: {expr} reads no vllm: series"
            assert names <= real, f"{key}: {expr} reads {sorted(names - real)}, which vLLM 0.32 does not export"
            total += 1
            sent = _as_grafana_sends(expr, vllm_server.model)
            assert prometheus.query(sent), f"{key}: the dashboard query returned nothing: {sent}"
            answered += 1
    print(f"\n[monitoring] vLLM 0.32.0's own dashboards: {total} queries, every series exported by the real "
          f"server, all {answered} return data through Prometheus after 6 completions")
