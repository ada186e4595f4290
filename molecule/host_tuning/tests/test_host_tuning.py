"""host_tuning verifier: the persisted files, their content, the boot unit, and the handler logic."""

from __future__ import annotations

import re
from pathlib import Path

SYSCTL_FILE = "/etc/sysctl.d/60-vllm-fleet.conf"
EXPECTED = {
    "vm.overcommit_memory": "1",
    "net.core.somaxconn": "10240",
    "vm.swappiness": "10",  # overridden in molecule.yml
    "vm.max_map_count": "1048576",
    "net.ipv4.tcp_max_syn_backlog": "10240",
    "net.ipv4.tcp_keepalive_time": "60",
    "fs.file-max": "2097152",
    "net.ipv4.tcp_fin_timeout": "15",  # added by host_tuning_sysctl_overrides
    "vm.nr_hugepages": "512",  # host_tuning_hugepages
}


def _parse_sysctl(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _sep, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def test_sysctl_file_persisted_with_values(host):
    f = host.file(SYSCTL_FILE)
    assert f.exists and f.user == "root" and f.mode == 0o644
    values = _parse_sysctl(f.content_string)
    for key, value in EXPECTED.items():
        assert values.get(key) == value, f"{key}: {values.get(key)!r} != {value!r}"
    # each parameter has its one-line reason right above it
    lines = f.content_string.splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[i - 1].startswith("# "), f"no comment above {line!r}"


def test_every_sysctl_key_exists_in_the_kernel(host):
    """sysctl -p parses our file against the real kernel: read-only is expected in a container,
    an unknown key ("cannot stat") would be a typo in the role."""
    out = host.run(f"sysctl -p {SYSCTL_FILE}")
    text = out.stdout + out.stderr
    assert "cannot stat" not in text, text
    assert re.search(r"Read-only file system|permission denied", text, re.IGNORECASE) or out.rc == 0, text


def test_limits(host):
    f = host.file("/etc/security/limits.d/90-vllm-fleet.conf")
    assert f.exists and f.mode == 0o644
    assert re.search(r"^\*\s+hard\s+nofile\s+1048576$", f.content_string, re.MULTILINE)
    assert re.search(r"^\*\s+soft\s+memlock\s+unlimited$", f.content_string, re.MULTILINE)
    s = host.file("/etc/systemd/system.conf.d/60-vllm-fleet-limits.conf").content_string
    assert "DefaultLimitNOFILE=1048576" in s and "DefaultLimitMEMLOCK=infinity" in s


def test_thp_governor_unit_enabled_and_script_runs(host):
    unit = host.service("vllm-fleet-host-tuning.service")
    assert unit.is_enabled
    script = host.file("/usr/local/sbin/vllm-fleet-host-tuning")
    assert script.mode == 0o755
    assert "put madvise /sys/kernel/mm/transparent_hugepage/enabled" in script.content_string
    out = host.run("/usr/local/sbin/vllm-fleet-host-tuning")
    assert out.rc == 0, out.stderr
    # /sys is read-only in the container: the script must say so instead of failing.
    assert "skip /sys/kernel/mm/transparent_hugepage/enabled" in out.stdout
    assert "CPU governor" in out.stdout or "scaling_governor" in out.stdout


def test_check_mode_on_converged_host_changes_nothing(check_run):
    assert check_run.rc == 0, check_run.output[-3000:]
    assert check_run.recap, check_run.output[-3000:]
    for host, counts in check_run.recap.items():
        assert counts["changed"] == 0, f"{host}: {counts}\n{check_run.output[-3000:]}"


def test_apply_handler_runs_sysctl_when_enabled(converge_playbook):
    """host_tuning_apply=true: the handler really runs `sysctl -p`; the container's read-only
    /proc/sys makes it fail with the kernel's own message, which proves the command ran."""
    from conftest import run_playbook  # molecule/conftest.py

    play = Path(__file__).parent / "apply_handler.yml"
    run = run_playbook(play, "-e", '{"host_tuning_apply": true}')
    assert run.rc != 0
    assert "Apply kernel parameters now" in run.output
    assert re.search(r"Read-only file system|permission denied", run.output, re.IGNORECASE), run.output[
        -3000:
    ]


def test_apply_disabled_reports_next_boot(converge_playbook):
    from conftest import run_playbook

    play = Path(__file__).parent / "apply_handler.yml"
    run = run_playbook(play, "-e", '{"host_tuning_apply": false}')
    assert run.rc == 0, run.output[-3000:]
    assert "gets the new settings at its next boot" in " ".join(run.output.split())  # yaml wraps lines
