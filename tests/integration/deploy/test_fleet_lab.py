"""The fleet lab through the real site.yml (conftest.py): one plan carried whole, the secret where it belongs.

- through the load balancer a request without the key gets 401 and with the key 200, on every replica
  (HAProxy's per-server response counters show each one answered both);
- what each container runs (engine config file, command, environment names, GPUs, port) equals its record
  in plans.json;
- a second run reports changed=0 on every host (at -vvv), and --check --diff on the converged fleet too;
- the key (and the balancer's TLS key) appears in no output (any run, -vvv included) and in no artifact;
- the balancer speaks HTTPS only: its clients verify the lab's certificate (conftest.lb_connection).

Figures go to artifacts/deploy/fleet-lab.json and the test output.
"""

from __future__ import annotations

import csv
import http.client
import io
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .._helpers import record_figure
from .conftest import (
    API_KEY,
    EXTRA_ARGS,
    HOSTS,
    LB_PORT,
    ROOT,
    SERVED,
    STATS_PORT,
    Lab,
    containers,
    inspect,
    lb_connection,
    ok,
    recap,
)

pytestmark = pytest.mark.integration

FIGURES = ROOT / "artifacts" / "deploy" / "fleet-lab.json"


def _figure(name: str, value: Any) -> None:
    record_figure(FIGURES, "fleet-lab", name, value)


def _completion(port: int, key: str | None) -> int:
    body = json.dumps({"model": SERVED, "prompt": "The fleet", "max_tokens": 4, "temperature": 0})
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    # The balancer speaks HTTPS only (its certificate verified); the replicas behind it plain HTTP on 127.0.0.1.
    conn = lb_connection() if port == LB_PORT else http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v1/completions", body, headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _server_stats() -> dict[str, dict[str, int]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{STATS_PORT}/stats;csv", timeout=10) as resp:
        text = resp.read().decode().lstrip("# ")
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row["svname"] not in ("FRONTEND", "BACKEND"):
            out[row["svname"]] = {k: int(row[k] or 0) for k in ("hrsp_2xx", "hrsp_4xx")}
    return out


def test_site_converges_the_fleet(lab: Lab) -> None:
    assert lab.first is not None
    out = ok(lab.first)
    counts = recap(out)
    assert set(HOSTS) <= set(counts), counts
    assert containers() == sorted(HOSTS)
    records = lab.records()
    assert sorted(records) == sorted(HOSTS)
    for host in HOSTS:
        assert inspect(host)["State"]["Health"]["Status"] == "healthy"
        assert records[host]["launch"]["secret_env_names"] == ["VLLM_API_KEY"]
        # Feedback into the plan: vLLM's logged KV sizing equals the record's prediction exactly on the CPU
        # lane (the KV space is explicit); a summary line per host in the output.
        report = json.loads((lab.workdir / "feedback" / f"{host}.json").read_text())
        assert report["status"] == "ok", report
        (replica,) = report["replicas"]
        assert replica["observed"]["kv_cache_tokens"] == records[host]["plan"]["prediction"]["kv_cache_tokens"]
        assert f"{host}: plan feedback ok" in out
        # The health gate's wait reads as progress (replica_wait), not as a retry per probe.
        assert re.search(rf"^{host}: \S+ ready after \d+ s \(\d+ probes\)$", out, flags=re.M), out[-3000:]
    _figure("first_converge", {"hosts": len(HOSTS), "seconds": round(lab.first_seconds), "recap": counts})


def test_the_key_is_required_through_the_load_balancer_on_every_replica(lab: Lab) -> None:
    before = _server_stats()
    rounds = 3 * len(HOSTS)  # roundrobin: each replica answers each kind at least once
    without = [_completion(LB_PORT, None) for _round in range(rounds)]
    wrong = [_completion(LB_PORT, "not-the-key") for _round in range(rounds)]
    with_key = [_completion(LB_PORT, API_KEY) for _round in range(rounds)]
    after = _server_stats()
    assert set(without) == {401} and set(wrong) == {401}, (without, wrong)
    assert set(with_key) == {200}, with_key
    per_server = {}
    for host in HOSTS:
        got_4xx = after[host]["hrsp_4xx"] - before.get(host, {}).get("hrsp_4xx", 0)
        got_2xx = after[host]["hrsp_2xx"] - before.get(host, {}).get("hrsp_2xx", 0)
        assert got_4xx >= 1 and got_2xx >= 1, (host, got_4xx, got_2xx)
        per_server[host] = {"401": got_4xx, "200": got_2xx}
    # Each replica enforces the key itself (not only through the load balancer).
    for host, port in HOSTS.items():
        assert _completion(port, None) == 401, host
        assert _completion(port, API_KEY) == 200, host
    _figure("auth", {"requests": 3 * rounds + 2 * len(HOSTS), "lb_401": len(without) + len(wrong),
                     "lb_200": len(with_key), "per_server": per_server})


def test_each_container_runs_its_record(lab: Lab) -> None:
    records = lab.records()
    for host in HOSTS:
        launch = records[host]["launch"]
        (replica,) = launch["replicas"]
        info = inspect(replica["container"])
        # The engine config the container reads (--config) is the record's engine_args, key for key.
        assert lab.engine_config(replica["container"]) == replica["engine_args"]
        assert info["Config"]["Cmd"] == replica["argv"]
        assert replica["engine_args"]["port"] == HOSTS[host] == replica["port"]
        # Environment: the record's names are set in the container; anything else is the image's own.
        image_env = {e.split("=", 1)[0] for e in json.loads(
            __import__("subprocess").run(["docker", "image", "inspect", "--format", "{{json .Config.Env}}",
                                          info["Image"]], check=True, capture_output=True, text=True).stdout)}
        names = {e.split("=", 1)[0] for e in info["Config"]["Env"]}
        assert set(replica["env_names"]) <= names, (host, replica["env_names"], names)
        assert names - set(replica["env_names"]) <= image_env, names - set(replica["env_names"]) - image_env
        assert "VLLM_API_KEY" in replica["env_names"]
        values = dict(e.split("=", 1) for e in info["Config"]["Env"])
        for name, value in replica["env"].items():
            assert values[name] == value, (host, name)
        assert replica["device_ids"] == [] and replica["node_rank"] == 0 and replica["nodes"] == [host]
        assert replica["master_address"] is None
        mounts = {m["Destination"]: m for m in info["Mounts"]}
        assert mounts[launch["model_mount"]]["Source"] == launch["model_dir"]
        assert mounts[launch["config_mount"]]["RW"] is False


def test_the_pinned_settings_reach_vllm(lab: Lab) -> None:
    """The inventory's extra args end each container's command, its pinned false is in the engine file as vLLM's
    loader reads it, and vLLM's own start-up line lists all three as set (`non-default args: {...}`,
    vllm/entrypoints/serve/utils/api_utils.py:284-286 in 0.32.0)."""
    for host in HOSTS:
        (replica,) = lab.records()[host]["launch"]["replicas"]
        assert inspect(replica["container"])["Config"]["Cmd"][-3:] == EXTRA_ARGS
        assert lab.engine_config(replica["container"])["no-use-tqdm-on-load"] is True
        assert lab.engine_config(replica["container"])["enable-prefix-caching"] is True
        log = subprocess.run(["docker", "logs", replica["container"]], capture_output=True, text=True, check=True)
        lines = [line for line in (log.stdout + log.stderr).splitlines() if "non-default args:" in line]
        assert lines, (log.stdout + log.stderr)[-3000:]
        for needle in ("'enable_auto_tool_choice': True", "'tool_call_parser': 'hermes'",
                       "'use_tqdm_on_load': False", "'enable_prefix_caching': True"):
            assert needle in lines[-1], lines[-1]


def test_second_run_changes_nothing_and_check_diff_agrees(lab: Lab) -> None:
    started = {host: inspect(host)["State"]["StartedAt"] for host in HOSTS}
    t0 = time.monotonic()
    second = recap(ok(lab.play("-vvv")))
    t1 = time.monotonic()
    check = recap(ok(lab.play("--check", "--diff")))
    t2 = time.monotonic()
    assert second and all(c["changed"] == 0 for c in second.values()), second
    assert check and all(c["changed"] == 0 for c in check.values()), check
    assert {host: inspect(host)["State"]["StartedAt"] for host in HOSTS} == started
    _figure("second_run", {"seconds": round(t1 - t0), "changed": sum(c["changed"] for c in second.values()),
                           "check_diff_seconds": round(t2 - t1),
                           "check_changed": sum(c["changed"] for c in check.values())})


def test_the_key_is_in_no_output_and_no_artifact(lab: Lab) -> None:
    assert lab.outputs, "no run was recorded"
    assert any("-vvv" in o or "<127.0.0.1>" in o or "ESTABLISH LOCAL CONNECTION" in o for o in lab.outputs)
    key_lines = [line for line in lab.tls_key.splitlines() if line and not line.startswith("-----")]
    for index, output in enumerate(lab.outputs):
        assert API_KEY not in output, f"run {index} printed the API key"
        assert not any(line in output for line in key_lines), f"run {index} printed the TLS key"
    leaked = []
    for base in (lab.artifacts, lab.workdir / "serve", lab.workdir / "feedback", lab.workdir / "lb",
                 ROOT / "artifacts"):
        for path in Path(base).rglob("*") if Path(base).exists() else []:
            if not path.is_file():
                continue
            data = path.read_bytes()
            # The balancer's own secrets, 0600 on its host: the generating check's key (HAProxy's environment) and
            # the TLS key. Anywhere else either is a leak.
            if path in (lab.workdir / "lb" / "check.env", lab.workdir / "lb" / "tls" / "fleet.pem.key"):
                assert path.stat().st_mode & 0o777 == 0o600, path
                continue
            if API_KEY.encode() in data or any(line.encode() in data for line in key_lines):
                leaked.append(str(path))
    assert not leaked, leaked
