"""testinfra checks of the monitoring role in its molecule container."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import run_playbook

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


def test_node_exporter_package_and_service(host) -> None:  # type: ignore[no-untyped-def]
    """playbooks/monitoring.yml's first play: Debian's node exporter on the vLLM host, with the role's arguments."""
    assert host.package("prometheus-node-exporter").is_installed
    service = host.service("prometheus-node-exporter")
    assert service.is_running and service.is_enabled
    assert (
        'ARGS="--web.listen-address=:9100"'
        in host.file("/etc/default/prometheus-node-exporter").content_string
    )
    assert host.socket("tcp://0.0.0.0:9100").is_listening or host.socket("tcp://:::9100").is_listening


def _query(expr: str) -> list[dict]:
    url = f"{API}/api/v1/query?query={urllib.parse.quote(expr)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        result: list[dict] = json.load(response)["data"]["result"]
    return result


def test_prometheus_scrapes_the_node_exporter() -> None:
    """The node job's target for vf-mon-node1 (by its inventory name) is up and its series carry the host label;
    gpu-a's (not installed here: monitoring_node_exporter_install false) is scraped, and down."""
    deadline = time.monotonic() + 60  # the first scrape comes within one 15 s interval of the start
    while not (up := _query('up{job="node",host="vf-mon-node1"}')) and time.monotonic() < deadline:
        time.sleep(3)
    with urllib.request.urlopen(f"{API}/api/v1/targets", timeout=10) as response:
        targets = {
            t["labels"]["host"]: t
            for t in json.load(response)["data"]["activeTargets"]
            if t["labels"]["job"] == "node"
        }
    assert up and up[0]["value"][1] == "1", targets
    assert targets["vf-mon-node1"]["scrapeUrl"] == "http://vf-mon-node1:9100/metrics"
    assert targets["gpu-a"]["scrapeUrl"] == "http://127.0.0.2:9100/metrics"
    assert _query('node_uname_info{job="node",host="vf-mon-node1"}'), "no node exporter series in Prometheus"


def test_listens_on_loopback_only(host) -> None:  # type: ignore[no-untyped-def]
    assert host.socket("tcp://127.0.0.1:19090").is_listening
    assert not host.socket("tcp://0.0.0.0:9090").is_listening
    assert not host.socket("tcp://0.0.0.0:19090").is_listening


def test_config_and_rules_are_valid(host) -> None:  # type: ignore[no-untyped-def]
    check = host.run("promtool check config /etc/prometheus/prometheus.yml")
    assert check.rc == 0, check.stdout + check.stderr
    assert "SUCCESS: 8 rules found" in check.stdout


def test_scrape_jobs_come_from_the_inventory(host) -> None:  # type: ignore[no-untyped-def]
    config = yaml.safe_load(host.file("/etc/prometheus/prometheus.yml").content_string)
    jobs = {j["job_name"]: j["static_configs"] for j in config["scrape_configs"]}
    assert {"targets": ["vf-mon-node1:18490"], "labels": {"host": "vf-mon-node1"}} in jobs["vllm"]
    assert {"targets": ["127.0.0.2:18491", "127.0.0.2:18492"], "labels": {"host": "gpu-a"}} in jobs["vllm"]
    assert jobs["dcgm"] == [
        {"targets": ["vf-mon-node1:9400"], "labels": {"host": "vf-mon-node1"}},
        {"targets": ["127.0.0.2:9400"], "labels": {"host": "gpu-a"}},
    ]
    assert len(jobs["node"]) == 2


def test_rules_carry_runbooks(host) -> None:  # type: ignore[no-untyped-def]
    rules = yaml.safe_load(host.file(RULES).content_string)["groups"][0]["rules"]
    assert len(rules) == 8
    for rule in rules:
        assert rule["annotations"]["runbook_url"].endswith(".md")
        assert "{{ $labels.host }}" in rule["annotations"]["summary"]


def test_prometheus_loaded_the_rules_and_targets() -> None:
    """Through the real HTTP API (host networking: the container's Prometheus is on our loopback)."""
    with urllib.request.urlopen(f"{API}/api/v1/rules", timeout=10) as response:
        groups = json.load(response)["data"]["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    assert {"VllmKvCacheSaturated", "VllmReplicaOutOfBalancer"} <= names and len(names) == 8
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


@pytest.mark.parametrize("key", ["overview", "performance", "queries"])
def test_vllms_own_dashboards(host, key: str) -> None:  # type: ignore[no-untyped-def]
    """vLLM's own dashboards for the fleet's vLLM (no launch records here: the GPU hosts' default, 0.33.0), read out
    of the release's source archive on the package index and pointed at the fleet's Prometheus datasource."""
    f = host.file(f"/var/lib/vllm-fleet/grafana/dashboards/vllm-0.33.0-{key}.json")
    assert f.exists and f.mode == 0o644
    model = json.loads(f.content_string)
    assert model["uid"] == f"vllm-0-33-0-{key}" and model["title"].startswith("vLLM 0.33.0 ")
    assert "vllm-0.33.0.tar.gz" in model["description"]
    (datasource,) = [v for v in model["templating"]["list"] if v["type"] == "datasource"]
    assert datasource["current"]["value"] == "prometheus"
    assert any("vllm:" in t.get("expr", "") for p in model["panels"] for t in p.get("targets", []))


def test_dcgm_repository_configured(host) -> None:  # type: ignore[no-untyped-def]
    """NVIDIA's CUDA repository (here a mirror URL never fetched, with the tests' key) on the GPU host, under the
    nvidia_driver role's file name; the install is switched off in the converge (no GPU, no reachable repository)."""
    f = host.file("/etc/apt/sources.list.d/vllm-fleet-cuda.sources")
    assert f.exists and f.mode == 0o644
    text = f.content_string
    assert re.search(r"^URIs: http://127\.0\.0\.1:9/compute/cuda/repos/debian12/x86_64/$", text, re.M), text
    assert "Signed-By:" in text and "BEGIN PGP PUBLIC KEY BLOCK" in text
    out = host.run("apt-get indextargets --no-release-info 'Created-By: Packages'")
    assert out.rc == 0 and "127.0.0.1:9/compute/cuda/repos/debian12/x86_64" in out.stdout
    assert not host.package("datacenter-gpu-manager-exporter").is_installed
    assert not host.file("/etc/systemd/system/nvidia-dcgm-exporter.service.d").exists


def test_dcgm_exporter_install_in_check_mode(host) -> None:  # type: ignore[no-untyped-def]
    """The stage playbook with the install switched on, in --check --diff: NVIDIA's packages are asked for, the
    unit's drop-in carries the listen address, and nothing fails or changes on the host."""
    converge = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
    # Extra variables beat gpu-a's own "runs its own exporter": only the GPU host under test.
    run = run_playbook(converge, "--check", "--diff", "--limit", "vf-mon-node1",
                       "-e", '{"monitoring_dcgm_exporter_install": true}')
    assert run.rc == 0, run.output[-3000:]
    assert "dcgm_exporter | Install DCGM and the exporter from NVIDIA's repository" in run.output
    assert "datacenter-gpu-manager-4-core" in run.output  # apt's answer names the first package it cannot find
    assert 'Environment="DCGM_EXPORTER_LISTEN=:9400"' in run.output  # the drop-in's diff
    assert "...ignoring" in run.output
    assert run.recap["vf-mon-node1"]["failed"] == 0 and run.recap["vf-mon-node1"]["ignored"] >= 2
    assert not host.file("/etc/systemd/system/nvidia-dcgm-exporter.service.d").exists


def test_prometheus_scrapes_dcgm_where_it_is_installed() -> None:
    """The dcgm job's targets are the hosts the play installed it on (and gpu-a, which runs its own)."""
    with urllib.request.urlopen(f"{API}/api/v1/targets", timeout=10) as response:
        targets = {
            t["labels"]["host"]: t["scrapeUrl"]
            for t in json.load(response)["data"]["activeTargets"]
            if t["labels"]["job"] == "dcgm"
        }
    assert targets == {"vf-mon-node1": "http://vf-mon-node1:9400/metrics", "gpu-a": "http://127.0.0.2:9400/metrics"}
