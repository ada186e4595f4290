"""The rollout's canary/batch arithmetic and max_fail_percentage at 1,000 hosts, against real ansible-core.

``rollout.serial_batches`` gives deploy.yml's ``serial`` list and ``rollout.rollout_outcome`` says what Ansible does
when some hosts fail their gate. Here a real play over 1,000 inventory hosts (nothing contacted: the tasks run on
the controller) takes its ``serial`` from the same filter as deploy.yml, fails the chosen hosts, and the hosts that
finished, failed and never started must be exactly what the model says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.rollout import (
    rollout_outcome,
    serial_batches,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
HOSTS = 1000

PLAY = """---
- name: Rollout at scale
  hosts: vllm_servers
  gather_facts: false
  serial: >-
    {{ groups['vllm_servers'] | length | vllm_fleet.fleet.vllm_serial(vllm_fleet_rollout_canary | int,
       vllm_fleet_rollout_batch) }}
  max_fail_percentage: "{{ vllm_fleet_rollout_max_fail_percentage }}"
  tasks:
    - name: Gate
      ansible.builtin.fail:
        msg: gate failed
      when: inventory_hostname in failing
    - name: Done
      ansible.builtin.debug:
        msg: "finished {{ inventory_hostname }}"
"""


def run_rollout(tmp_path: Path, canary: int, batch: str, max_fail: int, failing: set[int]) -> dict[str, int]:
    names = [f"node-{i:04d}" for i in range(HOSTS)]
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    vllm_servers:\n      hosts:\n"
                         + "".join(f"        {n}:\n" for n in names))
    play = tmp_path / "rollout.yml"
    play.write_text(PLAY)
    extra = {"vllm_fleet_rollout_canary": canary, "vllm_fleet_rollout_batch": batch,
             "vllm_fleet_rollout_max_fail_percentage": max_fail, "failing": [names[i] for i in sorted(failing)]}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play),
                           "-e", json.dumps(extra)],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1200)
    out = proc.stdout + proc.stderr
    recap = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(node-\d+)\s*:.*failed=(\d+)", out, flags=re.M)}
    finished = set(re.findall(r"finished (node-\d+)", out))
    return {"rc": proc.returncode, "completed": len(finished),
            "failed": sum(1 for n in recap.values() if n) + sum(1 for name in recap if name not in finished
                                                                and not recap[name]),
            "not_started": HOSTS - len(recap)}


@pytest.mark.parametrize(
    ("canary", "batch", "max_fail", "failing"),
    [
        # 5 of a 100-host batch fail with 5 % tolerated: the rollout goes on through all 1,000 hosts. Failures count
        # per batch: those 5 do not count against the 99-host last batch (5/99 would be > 5 %).
        (1, "10%", 5, frozenset(range(101, 106))),
        # The canary fails with nothing tolerated: 999 hosts never start.
        (1, "10%", 0, frozenset({0})),
    ],
    ids=["tolerated-per-batch", "canary-stops"],
)
def test_rollout_matches_the_model_at_1000_hosts(tmp_path: Path, canary: int, batch: str, max_fail: int,
                                                 failing: frozenset[int]) -> None:
    expected = rollout_outcome(serial_batches(HOSTS, canary, batch), failing, max_fail)
    seen = run_rollout(tmp_path, canary, batch, max_fail, set(failing))
    assert seen["rc"] != 0  # any failed host fails the run, tolerated or not
    assert {k: seen[k] for k in ("completed", "failed", "not_started")} == \
        {k: expected[k] for k in ("completed", "failed", "not_started")}, (seen, expected)
