"""provision_fleet verifier: three hosts, one run; --check changes nothing; a real second converge changes nothing
on the hosts that finish it, while a host that dies mid-run fails alone and the summary names it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import RECAP_RE, parse_recap, project_dir, run_playbook

HOSTS = ["vf-prov-fleet-1", "vf-prov-fleet-2", "vf-prov-fleet-3"]
PLAYBOOK = project_dir() / "playbooks" / "provision.yml"


def _exec(name: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", name, *cmd], capture_output=True, text=True, check=False)


# No test here takes testinfra's `host` fixture: pytest would reorder them, and the last one kills a host.
def test_every_host_provisioned():
    for name in HOSTS:
        cfg = json.loads(_exec(name, "cat", "/etc/docker/daemon.json").stdout)
        assert cfg["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime", name
        assert _exec(name, "systemctl", "is-enabled", "docker").stdout.strip() == "enabled", name
        assert "vm.overcommit_memory = 1" in _exec(name, "cat", "/etc/sysctl.d/60-vllm-fleet.conf").stdout
        # CPU-lane hosts: the driver role was skipped
        assert _exec(name, "dpkg-query", "-W", "nvidia-driver").returncode != 0, name


def test_a_host_whose_apt_is_busy_is_waited_for():
    """prepare.yml held vf-prov-fleet-3's apt locks (lists, dpkg, frontend) for 90 s, as unattended-upgrades does
    after boot; the converge installed Docker there only after they were released (Ansible's own 60 s would have
    failed the host)."""
    name = "vf-prov-fleet-3"
    held = float(_exec(name, "cat", "/var/tmp/vf-apt-lock-held").stdout)
    released = float(_exec(name, "cat", "/var/tmp/vf-apt-lock-released").stdout)
    assert released - held >= 90
    log = _exec(name, "cat", "/var/log/dpkg.log").stdout.splitlines()
    installs = [line for line in log if " install docker.io:" in line]
    assert installs, "docker.io was not installed on " + name
    # dpkg.log writes the container's local time to the second
    installed = int(_exec(name, "date", "-d", installs[0][:19], "+%s").stdout)
    assert installed >= int(released), (installs[0], released)


def test_check_mode_on_converged_fleet_changes_nothing():
    run = run_playbook(PLAYBOOK, "--check")
    assert run.rc == 0, run.output[-3000:]
    assert sorted(run.recap) == HOSTS
    for name, counts in run.recap.items():
        assert counts["changed"] == 0, f"{name}: {counts}"
    assert "Provisioned 3 of 3 hosts; failed or unreachable: none" in run.output


def test_host_dying_mid_run_fails_alone():
    """Last test: kills vf-prov-fleet-2 when the run reaches host_tuning (all hosts in one batch). The run is the
    fleet's second real converge: the two hosts that finish it report changed=0."""
    inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
    cmd = ["ansible-playbook", "-i", str(inventory), str(PLAYBOOK), "-e", '{"provision_serial": 3}']
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    killed = False
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if not killed and line.startswith("TASK [vllm_fleet.fleet.host_tuning"):
            subprocess.run(["docker", "kill", "vf-prov-fleet-2"], check=True, capture_output=True)
            killed = True
    proc.wait(timeout=600)
    output = "".join(lines)
    assert killed, output[-3000:]
    recap = parse_recap(output)
    assert RECAP_RE.search(output), output[-3000:]
    assert proc.returncode != 0  # a host failed: the run says so in its exit status
    for name in ("vf-prov-fleet-1", "vf-prov-fleet-3"):
        assert recap[name]["failed"] == 0 and recap[name]["unreachable"] == 0, f"{name}: {recap[name]}"
        assert recap[name]["changed"] == 0, f"the second converge changed {name}: {recap[name]}"
    dead = recap["vf-prov-fleet-2"]
    assert dead["failed"] + dead["unreachable"] >= 1, dead
    assert "Provisioned 2 of 3 hosts; failed or unreachable: vf-prov-fleet-2" in output, output[-3000:]
