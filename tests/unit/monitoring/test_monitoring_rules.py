"""Pure tests of the alert rules, scrape configuration and dashboard builder (no Prometheus needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import monitoring as mr

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "monitoring"

# Names that blog posts use and vLLM 0.32 does NOT export (vllm-facts.md §B4).
INVENTED = {
    "vllm:requests_completed",
    "vllm:generation_throughput",
    "vllm:gpu_utilization",
    "vllm:memory_utilization",
    "vllm:gpu_cache_usage_perc",
}


def exported_names() -> set[str]:
    names: set[str] = set()
    for line in (FIXTURES / "vllm-0.32-metric-names.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, name = line.split()
        if kind == "counter":
            names.add(f"{name}_total")
        elif kind == "histogram":
            names.update({f"{name}_bucket", f"{name}_count", f"{name}_sum"})
        else:
            names.add(name)
    return names


def test_every_alert_uses_only_exported_series() -> None:
    known = exported_names()
    for name, expr in mr.alert_expressions().items():
        used = mr.series_names(expr)
        assert used, name
        assert used <= known, f"{name} uses {used - known}"
        assert not used & INVENTED


def test_series_names_parser_sees_names_and_skips_labels_and_ranges() -> None:
    expr = 'sum by (host) (rate(vllm:foo_total{job="a:b"}[5m] offset 1h)) / up{x="DCGM_X"} and DCGM_FI_DEV_GPU_UTIL'
    assert mr.series_names(expr) == {"vllm:foo_total", "up", "DCGM_FI_DEV_GPU_UTIL"}


def test_required_alerts_and_real_metric_names_are_present() -> None:
    exprs = mr.alert_expressions()
    assert set(exprs) == set(mr.RUNBOOKS)
    assert "DCGM_FI_DEV_GPU_UTIL" in exprs["VllmGpuUtilisationLow"]
    assert "vllm:num_requests_running" in exprs["VllmGpuUtilisationLow"]
    assert "vllm:time_to_first_token_seconds_bucket" in exprs["VllmChatTtftP99High"]
    assert "vllm:generation_tokens_total" in exprs["VllmThroughputSwing"]
    assert "vllm:kv_cache_usage_perc" in exprs["VllmKvCacheSaturated"]
    assert "vllm:num_preemptions_total" in exprs["VllmPreemptionsRising"]
    assert "vllm:num_requests_waiting" in exprs["VllmWaitingQueueGrowing"]


@pytest.mark.parametrize(
    ("key", "value", "alert", "fragment"),
    [
        ("gpu_util_min_percent", 55, "VllmGpuUtilisationLow", "< 55)"),
        ("ttft_max_seconds", 0.25, "VllmChatTtftP99High", "> 0.25)"),
        ("latency_quantile", 0.95, "VllmChatTtftP99High", "histogram_quantile(0.95,"),
        ("throughput_swing_ratio", 0.3, "VllmThroughputSwing", "> 0.3)"),
        ("kv_cache_usage_max", 0.8, "VllmKvCacheSaturated", "> 0.8"),
        ("preemption_rate_max", 0.5, "VllmPreemptionsRising", "> 0.5"),
        ("waiting_requests_max", 32, "VllmWaitingQueueGrowing", "> 32)"),
    ],
)
def test_thresholds_reach_the_expressions(key: str, value: float, alert: str, fragment: str) -> None:
    assert fragment not in mr.alert_expressions()[alert]
    assert fragment in mr.alert_expressions({key: value})[alert]


def test_durations_and_runbooks_in_rule_file() -> None:
    rules = mr.alert_rules({"kv_cache_for": "7m"}, "https://example.invalid/runbooks/")["groups"][0]["rules"]
    by_name = {r["alert"]: r for r in rules}
    assert by_name["VllmKvCacheSaturated"]["for"] == "7m"
    assert by_name["VllmEndpointDown"]["labels"]["severity"] == "critical"
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://example.invalid/runbooks/") and "//" not in url.split("://", 1)[1]
        assert "\n" not in rule["expr"]


def test_every_runbook_exists_and_has_the_sections() -> None:
    for alert, file in mr.RUNBOOKS.items():
        path = ROOT / "docs" / "runbooks" / file
        assert path.is_file(), f"{alert} points at missing {path}"
        text = path.read_text()
        for heading in ("## Confirm", "## What the plan's numbers mean", "## Change"):
            assert heading in text, f"{file} lacks {heading!r}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kv_cache_usage": 0.9}, "unknown monitoring threshold"),
        ({"kv_cache_usage_max": "high"}, "must be a number"),
        ({"kv_cache_usage_max": True}, "must be a number"),
        ({"waiting_requests_max": -1}, "must be >= 0"),
        ({"latency_quantile": 1.5}, "between 0 and 1"),
        ({"kv_cache_for": "5 minutes"}, "must look like"),
    ],
)
def test_bad_thresholds_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(mr.MonitoringConfigError, match=message):
        mr.alert_rules(overrides)


def test_scrape_configs_from_targets() -> None:
    jobs = mr.scrape_configs(
        [
            {"host": "gpu1", "address": "10.0.0.1", "vllm_ports": [8000, 8001], "dcgm": True},
            {"host": "cpu1", "vllm_ports": [18000], "node_exporter": False},
        ],
        node_exporter_port=9100,
        dcgm_exporter_port=9400,
    )
    by_job = {j["job_name"]: j for j in jobs}
    assert by_job["vllm"]["static_configs"] == [
        {"targets": ["10.0.0.1:8000", "10.0.0.1:8001"], "labels": {"host": "gpu1"}},
        {"targets": ["cpu1:18000"], "labels": {"host": "cpu1"}},
    ]
    assert by_job["node"]["static_configs"] == [{"targets": ["10.0.0.1:9100"], "labels": {"host": "gpu1"}}]
    assert by_job["dcgm"]["static_configs"] == [{"targets": ["10.0.0.1:9400"], "labels": {"host": "gpu1"}}]


def test_no_dcgm_job_without_gpu_hosts() -> None:
    jobs = mr.scrape_configs([{"host": "cpu1", "vllm_ports": [18000]}])
    assert [j["job_name"] for j in jobs] == ["vllm", "node"]


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ([{"host": "a", "vllm_ports": []}], "no vLLM port"),
        ([{"host": "a", "vllm_ports": [1, 1]}], "port twice"),
        ([{"host": "a", "vllm_ports": [1]}, {"host": "a", "vllm_ports": [2]}], "listed twice"),
    ],
)
def test_bad_targets_are_refused(targets: list[dict[str, object]], message: str) -> None:
    with pytest.raises(mr.MonitoringConfigError, match=message):
        mr.scrape_configs(targets)


def test_dashboard_queries_use_only_exported_series() -> None:
    model = mr.dashboard("vLLM fleet")
    queries = mr.dashboard_queries(model)
    assert len(queries) >= len(mr.DASHBOARD_PANELS)
    known = exported_names()
    for query in queries:
        assert mr.series_names(query) <= known, query
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[A-Z]", t["refId"]) for p in model["panels"] for t in p["targets"])


def test_targets_from_inventory_hostvars() -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.filter.observe import monitoring_targets

    hostvars = {
        "a": {"ansible_host": "127.0.0.2", "vllm_serve_port": 18000},
        "b": {"vllm_serve_port": 8000, "vllm_serve_plan": {"parallel": {"replicas": 3}}},
        "c": {"vllm_serve_ports": [9000, 9005], "monitoring_node_exporter_enabled": False},
        "d": {"ansible_facts": {"gpu": {"gpu_count": 2}}},
        "e": {"ansible_facts": {"gpu": {"gpu_count": 2}}, "monitoring_dcgm_enabled": False},
    }
    targets = {t["host"]: t for t in monitoring_targets(list(hostvars), hostvars)}
    assert targets["a"]["address"] == "127.0.0.2" and targets["a"]["vllm_ports"] == [18000]
    assert targets["b"]["vllm_ports"] == [8000, 8001, 8002]
    assert targets["c"]["vllm_ports"] == [9000, 9005] and not targets["c"]["node_exporter"]
    assert targets["d"]["vllm_ports"] == [8000] and targets["d"]["dcgm"]
    assert not targets["a"]["dcgm"] and not targets["e"]["dcgm"]


def test_targets_from_inventory_options_and_defaults() -> None:
    hostvars = {
        "a": {"svc_port": 7000, "svc_plan": {"parallel": {"replicas": 2}}, "monitoring_dcgm_enabled": True},
        "b": {},
    }
    targets = mr.targets_from_inventory(["a", "b"], hostvars, port_var="svc_port", plan_var="svc_plan",
                                        default_port=9000)
    assert targets == [
        {"host": "a", "address": "a", "vllm_ports": [7000, 7001], "node_exporter": True, "dcgm": True},
        {"host": "b", "address": "b", "vllm_ports": [9000], "node_exporter": True, "dcgm": False},
    ]
    assert mr.targets_from_inventory(["b"], hostvars)[0]["vllm_ports"] == [8000]


def test_exporter_ports_are_the_roles_defaults() -> None:
    defaults = (Path(__file__).resolve().parents[3] / "roles/monitoring/defaults/main.yml").read_text()
    assert f"monitoring_node_exporter_port: {mr.NODE_EXPORTER_PORT}\n" in defaults
    assert f"monitoring_dcgm_exporter_port: {mr.DCGM_EXPORTER_PORT}\n" in defaults
    jobs = {job["job_name"]: job for job in mr.scrape_configs([{"host": "h", "vllm_ports": [1], "dcgm": True}])}
    assert jobs[mr.NODE_JOB]["static_configs"][0]["targets"] == [f"h:{mr.NODE_EXPORTER_PORT}"]
    assert jobs[mr.DCGM_JOB]["static_configs"][0]["targets"] == [f"h:{mr.DCGM_EXPORTER_PORT}"]


@pytest.mark.parametrize(
    ("address", "port", "problem", "url"),
    [
        (":9100", 9100, "", "http://127.0.0.1:9100/metrics"),
        ("0.0.0.0:9400", 9400, "", "http://127.0.0.1:9400/metrics"),
        ("[::]:9400", 9400, "", "http://127.0.0.1:9400/metrics"),
        ("10.0.0.5:9400", 9400, "", "http://10.0.0.5:9400/metrics"),
        ("[fd00::5]:9100", 9100, "", "http://[fd00::5]:9100/metrics"),
        ("10.0.0.5:9401", 9400, "must end with the port Prometheus scrapes, 9400", "http://10.0.0.5:9401/metrics"),
        ("9100", 9100, "must be [HOST]:PORT", "http://9100/metrics"),
        ("fd00::5:9100", 9100, "must be [HOST]:PORT", "http://fd00::5:9100/metrics"),
    ],
)
def test_exporter_listen_address_against_the_scraped_port(address: str, port: int, problem: str, url: str) -> None:
    assert mr.exporter_listen(address, port) == {"problem": problem, "local_url": url}


def test_the_balancers_exporter_is_scraped_and_a_replica_out_of_it_alerts() -> None:
    hostvars = {"lb": {"vllm_lb_bind_address": "10.0.0.9", "vllm_lb_stats_port": 8404}, "lb2": {}}
    balancers = mr.balancer_targets(["lb", "lb2"], hostvars)
    jobs = mr.scrape_configs([{"host": "h1", "address": "10.0.0.1", "vllm_ports": [8000]}], balancers=balancers)
    (lb_job,) = [job for job in jobs if job["job_name"] == mr.LB_JOB]
    assert lb_job["static_configs"] == [{"targets": ["10.0.0.9:8404"], "labels": {"host": "lb"}}]  # lb2: no stats
    assert mr.LB_JOB not in [job["job_name"] for job in mr.scrape_configs([{"host": "h1", "vllm_ports": [8000]}])]
    rule = {r["alert"]: r for r in mr.alert_rules()["groups"][0]["rules"]}["VllmReplicaOutOfBalancer"]
    assert 'state="DOWN"' in rule["expr"] and rule["for"] == "30s" and rule["labels"]["severity"] == "critical"
    assert rule["annotations"]["runbook_url"] == "docs/runbooks/replica-not-serving.md"
