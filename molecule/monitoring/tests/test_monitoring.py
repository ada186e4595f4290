"""testinfra checks of the monitoring role in its molecule container."""

from __future__ import annotations

import json
import urllib.request

import pytest
import yaml

# Only the container: the inventory's second vLLM host (gpu-a) exists only as a scrape target.
testinfra_hosts = ["ansible://vf-mon-node1"]

RULES = "/etc/prometheus/rules/vllm-fleet.rules.yml"
API = "http://127.0.0.1:19090"


def _journal(host) -> str:  # type: ignore[no-untyped-def]
    return host.run("journalctl -u prometheus --no-pager -n 40").stdout


def test_package_and_service(host) -> None:  # type: ignore[no-untyped-def]
    assert host.package("prometheus").is_installed
    service = host.service("prometheus")
    try:
        assert service.is_running
        assert service.is_enabled
    except AssertionError:
        print(_journal(host))
        raise


def test_listens_on_loopback_only(host) -> None:  # type: ignore[no-untyped-def]
    assert host.socket("tcp://127.0.0.1:19090").is_listening
    assert not host.socket("tcp://0.0.0.0:9090").is_listening
    assert not host.socket("tcp://0.0.0.0:19090").is_listening


def test_config_and_rules_are_valid(host) -> None:  # type: ignore[no-untyped-def]
    check = host.run("promtool check config /etc/prometheus/prometheus.yml")
    assert check.rc == 0, check.stdout + check.stderr
    assert "SUCCESS: 7 rules found" in check.stdout


def test_scrape_jobs_come_from_the_inventory(host) -> None:  # type: ignore[no-untyped-def]
    config = yaml.safe_load(host.file("/etc/prometheus/prometheus.yml").content_string)
    jobs = {j["job_name"]: j["static_configs"] for j in config["scrape_configs"]}
    assert {"targets": ["vf-mon-node1:18490"], "labels": {"host": "vf-mon-node1"}} in jobs["vllm"]
    assert {"targets": ["127.0.0.2:18491", "127.0.0.2:18492"], "labels": {"host": "gpu-a"}} in jobs["vllm"]
    assert jobs["dcgm"] == [{"targets": ["127.0.0.2:9400"], "labels": {"host": "gpu-a"}}]
    assert len(jobs["node"]) == 2


def test_rules_carry_runbooks(host) -> None:  # type: ignore[no-untyped-def]
    rules = yaml.safe_load(host.file(RULES).content_string)["groups"][0]["rules"]
    assert len(rules) == 7
    for rule in rules:
        assert rule["annotations"]["runbook_url"].endswith(".md")
        assert "{{ $labels.host }}" in rule["annotations"]["summary"]


def test_prometheus_loaded_the_rules_and_targets() -> None:
    """Through the real HTTP API (host networking: the container's Prometheus is on our loopback)."""
    with urllib.request.urlopen(f"{API}/api/v1/rules", timeout=10) as response:
        groups = json.load(response)["data"]["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    assert "VllmKvCacheSaturated" in names and len(names) == 7
    with urllib.request.urlopen(f"{API}/api/v1/targets", timeout=10) as response:
        active = json.load(response)["data"]["activeTargets"]
    assert {t["labels"]["job"] for t in active} == {"vllm", "node", "dcgm"}


@pytest.mark.parametrize(
    "path",
    [
        "/var/lib/vllm-fleet/grafana/dashboards/vllm-fleet.json",
        "/var/lib/vllm-fleet/grafana/provisioning/dashboards/vllm-fleet.yml",
        "/var/lib/vllm-fleet/grafana/provisioning/datasources/vllm-fleet-prometheus.yml",
    ],
)
def test_grafana_files(host, path: str) -> None:  # type: ignore[no-untyped-def]
    f = host.file(path)
    assert f.exists and f.mode == 0o644
    if path.endswith(".json"):
        model = json.loads(f.content_string)
        assert model["uid"] == "vllm-fleet"
        exprs = [t["expr"] for p in model["panels"] for t in p["targets"]]
        assert any("vllm:kv_cache_usage_perc" in e for e in exprs)
