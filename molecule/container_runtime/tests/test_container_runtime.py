"""container_runtime verifier: real dockerd inside the test container reads our daemon.json.

Every test takes the `host` fixture so that pytest keeps file order (it groups tests by parametrized
fixtures): the last test changes the host.
"""

from __future__ import annotations

import json
import re

from conftest import run_playbook


def _docker_info(host) -> dict:
    return json.loads(host.check_output("docker info --format '{{json .}}'"))


def test_engine_installed_enabled_running(host):
    assert host.package("docker.io").is_installed
    svc = host.service("docker")
    assert svc.is_enabled
    if not svc.is_running:  # print the journal before failing
        print(host.run("journalctl -u docker --no-pager -n 40").stdout)
    assert svc.is_running


def test_daemon_json(host):
    f = host.file("/etc/docker/daemon.json")
    assert f.exists and f.user == "root" and f.mode == 0o644
    cfg = json.loads(f.content_string)
    assert cfg["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}
    assert "default-runtime" not in cfg
    assert cfg["log-driver"] == "json-file"
    assert cfg["log-opts"] == {"max-size": "100m", "max-file": "5"}
    assert cfg["live-restore"] is True
    assert cfg["registry-mirrors"] == ["http://127.0.0.1:9"]
    assert cfg["storage-driver"] == "vfs"  # container_runtime_daemon_extra merged last
    # sorted keys, 2-space indent: diffable under --diff
    assert f.content_string.splitlines()[1].startswith('  "')


def test_running_dockerd_loaded_our_config(host):
    info = _docker_info(host)
    assert "nvidia" in info["Runtimes"]
    assert info["Runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert info["LiveRestoreEnabled"] is True
    assert info["LoggingDriver"] == "json-file"
    assert "http://127.0.0.1:9/" in info["RegistryConfig"]["Mirrors"]
    assert info.get("HttpProxy", info.get("HTTPProxy")) == "http://127.0.0.1:9"


def test_proxy_dropin(host):
    f = host.file("/etc/systemd/system/docker.service.d/http-proxy.conf")
    assert f.exists and f.mode == 0o644
    env = host.check_output("systemctl show docker -p Environment")
    assert "HTTP_PROXY=http://127.0.0.1:9" in env
    assert "NO_PROXY=localhost,127.0.0.1" in env


def test_nvidia_toolkit_repository_configured(host):
    f = host.file("/etc/apt/sources.list.d/vllm-fleet-nvidia-container-toolkit.sources")
    assert f.exists and f.mode == 0o644
    text = f.content_string
    assert re.search(
        r"^URIs: http://127\.0\.0\.1:9/libnvidia-container/stable/deb/\$\(ARCH\)$", text, re.M
    ), text
    assert re.search(r"^Suites: /$", text, re.MULTILINE), text
    assert "Signed-By:" in text and "BEGIN PGP PUBLIC KEY BLOCK" in text
    # apt understands the file (it lists the source; fetching it is not attempted here)
    out = host.run("apt-get indextargets --no-release-info 'Created-By: Packages'")
    assert out.rc == 0
    assert "127.0.0.1:9/libnvidia-container/stable/deb/amd64" in out.stdout
    assert not host.package("nvidia-container-toolkit").is_installed  # install switched off


def test_check_mode_on_converged_host_changes_nothing(host, check_run):
    assert check_run.rc == 0, check_run.output[-3000:]
    assert check_run.recap
    for host, counts in check_run.recap.items():
        assert counts["changed"] == 0, f"{host}: {counts}\n{check_run.output[-4000:]}"


def test_toolkit_install_task_in_check_mode(host, converge_playbook):
    run = run_playbook(
        converge_playbook, "--check", "-e", '{"container_runtime_nvidia_toolkit_install": true}'
    )
    assert run.rc == 0, run.output[-3000:]
    assert "nvidia_toolkit | Packages" in run.output
    assert "nvidia-container-toolkit" in run.output
    assert "...ignoring" in run.output
    for counts in run.recap.values():
        assert counts["ignored"] == 1 and counts["changed"] == 0


def test_changed_config_restarts_dockerd(host, converge_playbook):
    """Last: changes the host. A new mirror → daemon.json changes → handler restarts dockerd → live."""
    run = run_playbook(
        converge_playbook, "-e", '{"container_runtime_registry_mirrors": ["http://127.0.0.1:7"]}'
    )
    assert run.rc == 0, run.output[-3000:]
    assert "RUNNING HANDLER [vllm_fleet.fleet.container_runtime : Restart docker]" in run.output
    info = _docker_info(host)
    assert info["RegistryConfig"]["Mirrors"] == ["http://127.0.0.1:7/"]
