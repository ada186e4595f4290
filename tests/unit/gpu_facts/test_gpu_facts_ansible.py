"""vllm_fleet.fleet.gpu_facts through real Ansible on localhost: ad hoc and a tiny playbook.

This machine has no nvidia-smi, so a plain run is the CPU lane with the real host facts; a stand-in
nvidia-smi (tests/fixtures/gpu/bin/nvidia-smi) put first on PATH replays a recorded fixture.
About 2-3 s per Ansible run.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ._gpu_fixtures import FIXTURES, ROOT, load_json

ANSIBLE_BIN = Path(sys.executable).parent
PLAYBOOK = Path(__file__).parent / "playbooks" / "gpu_facts_localhost.yml"


def ansible_env(tmp_path: Path, fixture: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
            "ANSIBLE_LOCALHOST_WARNING": "False",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "True",
            "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree",
            "ANSIBLE_CALLBACK_TREE_DIR": str(tmp_path / "tree"),
            "ANSIBLE_NOCOLOR": "True",
        }
    )
    env.pop("FAKE_NVIDIA_SMI_FIXTURE", None)
    if fixture is not None:
        env["PATH"] = f"{FIXTURES / 'bin'}{os.pathsep}{env['PATH']}"
        env["FAKE_NVIDIA_SMI_FIXTURE"] = str(FIXTURES / fixture)
        env["FAKE_NVIDIA_SMI_LOG"] = str(tmp_path / "nvidia-smi.log")
    return env


def adhoc(
    tmp_path: Path, fixture: str | None, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the module ad hoc on localhost; return the process and the host's JSON result (tree callback)."""
    proc = subprocess.run(
        [str(ANSIBLE_BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", "vllm_fleet.fleet.gpu_facts", *args],
        env=ansible_env(tmp_path, fixture), cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    tree = tmp_path / "tree" / "localhost"
    assert tree.exists(), proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(tree.read_text(encoding="utf-8"))
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc, result


def real_host() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text(encoding="utf-8")
    kb = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")))
    return {
        "memory_total_mib": kb // 1024,
        "cpu_cores": len(os.sched_getaffinity(0)),
        "architecture": platform.machine(),
    }


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi: not the CPU lane"
)
def test_cpu_lane_on_this_machine(tmp_path: Path) -> None:
    proc, result = adhoc(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gpu = result["ansible_facts"]["gpu"]
    assert result["changed"] is False and result["source"] == "none"
    assert (gpu["gpus"], gpu["gpu_count"], gpu["gpu_name"], gpu["interconnect"]) == ([], 0, None, None)
    host = gpu["host"]
    assert {key: host[key] for key in ("memory_total_mib", "cpu_cores", "architecture")} == real_host()
    assert host["numa_nodes"] >= 1


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi: not the CPU lane"
)
def test_require_gpu_on_this_machine_fails_clearly(tmp_path: Path) -> None:
    proc, result = adhoc(tmp_path, None, "-a", "require_gpu=true")
    assert proc.returncode != 0 and "FAILED!" in proc.stdout
    assert "nvidia-smi is not installed" in result["msg"]


def test_replayed_mig_host(tmp_path: Path) -> None:
    proc, result = adhoc(tmp_path, "a100_80gb_mig", "-a", "require_gpu=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gpu = result["ansible_facts"]["gpu"]
    expected = load_json("a100_80gb_mig", "expected_facts.json")
    assert {key: gpu["host"][key] for key in ("memory_total_mib", "cpu_cores", "architecture")} == real_host()
    assert {k: v for k, v in gpu.items() if k != "host"} == {k: v for k, v in expected.items() if k != "host"}
    calls = [
        json.loads(line) for line in (tmp_path / "nvidia-smi.log").read_text(encoding="utf-8").splitlines()
    ]
    # no topo -m for one GPU; the PCIe link last (the folder has no -q text: a failed call, its keys null)
    assert [call["argv"] for call in calls[1:]] == [[], ["-L"], ["-q"]]
    assert calls[0]["argv"][0].startswith("--query-gpu=index,uuid,name,pci.bus_id,")
    assert {call["lc_all"] for call in calls} == {"C"}


def test_replayed_driver_mismatch_fails_the_task(tmp_path: Path) -> None:
    proc, result = adhoc(tmp_path, "driver_mismatch")
    assert proc.returncode != 0 and "FAILED!" in proc.stdout
    assert result["changed"] is False
    assert result["rc"] == 18
    assert "Driver/library version mismatch" in result["msg"] and "reboot" in result["msg"]


def test_playbook_probe_check_mode_and_recorded_facts(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(ANSIBLE_BIN / "ansible-playbook"), "-i", "localhost,", str(PLAYBOOK),
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"gpu_facts_recorded={FIXTURES / 'a100_80gb_x8' / 'expected_facts.json'}",
         "-e", "gpu_facts_recorded_count=8", "-e", "gpu_facts_expected_count=8",
         "-e", "gpu_facts_expected_interconnect=nvswitch"],
        env=ansible_env(tmp_path, "h100x8_nvswitch"), cwd=tmp_path, capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"localhost\s*:\s*ok=5\s+changed=0\s+unreachable=0\s+failed=0", out), out
