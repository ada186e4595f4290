"""Fleet-scale benchmark: preflight on N-host inventories next to a bare one-task play (Ansible's own floor).

For each N it builds an inventory of N hosts from the example fleet's recorded facts (the example's five hosts
repeated, each copy with its own GPU UUIDs, multi-node pairs kept as pairs), then times

- ``playbooks/preflight.yml`` planning every host from recorded facts (no host contacted), and
- the same preflight as ``site.yml`` runs it (``__vllm_fleet_deploying: true``: every host is handed its launch
  record) followed by one per-host task that reads ``vllm_fleet_launch`` (the first task of a later stage), and
- a bare play with one ``ansible.builtin.debug`` task over the same hosts,

and prints both wall times, their ratio and the peak resident memory of each ansible-playbook run (its
largest process). Nothing is contacted; everything runs on the controller.

    .venv/bin/python scripts/bench_fleet.py --hosts 100 1000 5000 [--json artifacts/bench/fleet.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "inventories" / "example"
VENV = ROOT / ".venv" / "bin"
SKU = {"h200-01": "gpu_h200", "h100-01": "gpu_h100", "h100-02": "gpu_h100", "l40s-01": "gpu_l40s",
       "t4-01": "gpu_t4"}
BARE_PLAY = """---
- name: Bare | one task per host (Ansible's own floor)
  hosts: vllm_servers
  gather_facts: false
  tasks:
    - name: Bare | One task
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}"
      changed_when: false
"""

DEPLOY_PATH = """---
- name: Preflight as site.yml imports it
  ansible.builtin.import_playbook: {preflight}
  vars:
    __vllm_fleet_deploying: true

- name: Bench | the first task of a later stage reads each host's launch record
  hosts: vllm_servers
  gather_facts: false
  tasks:
    - name: Bench | One task
      ansible.builtin.debug:
        msg: "{{{{ inventory_hostname }}}}: {{{{ vllm_fleet_launch.replicas | length }}}} replica(s)"
      changed_when: false
"""


def build(workdir: Path, n_hosts: int) -> Path:
    """An inventory of ``n_hosts`` hosts (copies of the example's five) with their recorded facts."""
    inv = workdir / "inventory"
    facts_dir = workdir / "facts"
    facts_dir.mkdir(parents=True)
    shutil.copytree(EXAMPLE / "group_vars", inv / "group_vars")
    shutil.copytree(EXAMPLE / "models", inv / "models")
    templates = {name: json.loads((EXAMPLE / "recorded_facts" / f"{name}.json").read_text()) for name in SKU}
    groups: dict[str, dict[str, dict[str, object]]] = {sku: {} for sku in sorted(set(SKU.values()))}
    names = list(SKU)
    for i in range(n_hosts):
        base = names[i % len(names)]
        copy_no = i // len(names)
        host = f"{base}-c{copy_no:05d}"
        facts = json.loads(json.dumps(templates[base]))
        for gpu in facts.get("gpus") or []:
            gpu["uuid"] = f"{gpu['uuid'][:-12]}{copy_no:012d}"
        (facts_dir / f"{host}.json").write_text(json.dumps(facts))
        hostvars: dict[str, object] = {"ansible_host": f"{host}.example.invalid"}
        if base.startswith("h100"):
            # A multi-node node needs its IP (VLLM_HOST_IP) and NCCL/Gloo interface, which recorded facts
            # without network do not give: addresses from the benchmarking range (RFC 2544), never contacted.
            hostvars.update(ansible_host=f"198.18.{i // 250}.{i % 250 + 1}",
                            vllm_fleet_multinode_group=f"llama405b-{copy_no:05d}",
                            vllm_fleet_env={"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"})
        groups[SKU[base]][host] = hostvars
    # A partial last H100 pair would be an incomplete multi-node group: drop its lone node.
    h100 = groups["gpu_h100"]
    pairs: dict[object, list[str]] = {}
    for host, hv in h100.items():
        pairs.setdefault(hv["vllm_fleet_multinode_group"], []).append(host)
    for members in pairs.values():
        if len(members) == 1:
            del h100[members[0]]
            (facts_dir / f"{members[0]}.json").unlink()
    children = {sku: {"hosts": hosts} for sku, hosts in groups.items() if hosts}
    (inv / "hosts.yml").write_text(json.dumps({"all": {"children": {"vllm_servers": {"children": children}}}}))
    return inv


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB, largest process), the output."""
    start = time.monotonic()
    wrapped = ["/usr/bin/time", "-f", "%M", *cmd] if Path("/usr/bin/time").exists() else cmd
    proc = subprocess.run(wrapped, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[:6000]}\n{proc.stderr[-3000:]}")
    peak = 0
    if wrapped is not cmd:
        last = proc.stderr.strip().splitlines()[-1]
        peak = int(last) if last.isdigit() else 0
    return wall, peak, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               PATH=f"{VENV}:{os.environ['PATH']}", VLLM_FLEET_API_KEY="bench-fleet-key-0123456789")
    rows = []
    print(f"{'hosts':>6}  {'preflight s':>11}  {'site path s':>11}  {'bare play s':>11}  {'ratio':>5}  "
          f"{'site ratio':>10}  {'preflight MiB':>13}  {'site MiB':>8}  {'bare MiB':>8}")
    for n_hosts in args.hosts:
        with tempfile.TemporaryDirectory(prefix="vf-bench-fleet-") as tmp:
            work = Path(tmp)
            inv = build(work, n_hosts)
            bare = work / "bare.yml"
            bare.write_text(BARE_PLAY)
            actual = sum(1 for f in (work / "facts").iterdir())
            pre_s, pre_kib, _out = run([str(VENV / "ansible-playbook"), "-i", str(inv / "hosts.yml"),
                                        os.environ.get("BENCH_PREFLIGHT", "playbooks/preflight.yml"), "-e", f"vllm_fleet_recorded_facts_dir={work / 'facts'}",
                                        "-e", f"vllm_fleet_artifacts_dir={work / 'artifacts'}"], env)
            plans = json.loads((work / "artifacts" / "fleet-plan" / "plans.json").read_text())
            assert len(plans) == actual, (len(plans), actual)
            site = work / "site-path.yml"
            site.write_text(DEPLOY_PATH.format(preflight=ROOT / "playbooks" / "preflight.yml"))
            site_s, site_kib, site_out = run([str(VENV / "ansible-playbook"), "-i", str(inv / "hosts.yml"), str(site),
                                              "-e", f"vllm_fleet_recorded_facts_dir={work / 'facts'}",
                                              "-e", f"vllm_fleet_artifacts_dir={work / 'artifacts'}"], env)
            assert site_out.count("replica(s)") == actual, site_out[-3000:]
            bare_s, bare_kib, _out = run([str(VENV / "ansible-playbook"), "-i", str(inv / "hosts.yml"), str(bare)], env)
        row = {"hosts": actual, "preflight_s": round(pre_s, 1), "site_path_s": round(site_s, 1),
               "bare_s": round(bare_s, 1), "ratio": round(pre_s / bare_s, 2), "site_ratio": round(site_s / bare_s, 2),
               "preflight_peak_mib": round(pre_kib / 1024), "site_peak_mib": round(site_kib / 1024),
               "bare_peak_mib": round(bare_kib / 1024)}
        rows.append(row)
        print(f"{row['hosts']:>6}  {row['preflight_s']:>11}  {row['site_path_s']:>11}  {row['bare_s']:>11}  "
              f"{row['ratio']:>5}  {row['site_ratio']:>10}  {row['preflight_peak_mib']:>13}  {row['site_peak_mib']:>8}  "
              f"{row['bare_peak_mib']:>8}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
