"""nvidia_driver verifier: real Debian R535 packages, the apt source, nouveau, persistence, and the
role's decisions exercised with ansible-playbook against the converged container."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import project_dir, run_playbook


def _driver_compat():
    collections = str(project_dir() / "collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision import driver

    return driver


def test_r535_packages_installed(host):
    for name in ("nvidia-driver", "nvidia-smi", "libnvidia-ml1"):
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version.startswith("535."), f"{name} {pkg.version}"
    assert host.package("nvidia-persistenced").is_installed


def test_nonfree_source_is_a_separate_deb822_file(host):
    f = host.file("/etc/apt/sources.list.d/vllm-fleet-debian-nonfree.sources")
    assert f.exists and f.mode == 0o644
    text = f.content_string
    assert re.search(r"^Components: contrib non-free non-free-firmware$", text, re.MULTILINE), text
    assert re.search(r"^Suites: bookworm bookworm-updates$", text, re.MULTILINE), text
    # the same mirror as the host's own Debian sources, which stay untouched
    host_sources = host.file("/etc/apt/sources.list.d/debian.sources").content_string
    mirror = re.search(r"^URIs:\s*(\S+)", host_sources, re.MULTILINE).group(1)
    assert re.search(rf"^URIs: {re.escape(mirror)}$", text, re.MULTILINE), text
    assert "non-free" not in host_sources
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "non-free" in policy


def test_nouveau_blacklisted(host):
    f = host.file("/etc/modprobe.d/vllm-fleet-blacklist-nouveau.conf")
    assert f.exists and f.mode == 0o644
    assert re.search(r"^blacklist nouveau$", f.content_string, re.MULTILINE)
    assert re.search(r"^options nouveau modeset=0$", f.content_string, re.MULTILINE)


def test_persistenced_enabled_not_started(host):
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled
    # nvidia_driver_manage_kernel_module: false → not started (no kernel module in a container)
    assert not svc.is_running


def test_nvidia_smi_is_real_and_classified_without_kernel_module(host):
    out = host.run("nvidia-smi")
    assert out.rc != 0
    dc = _driver_compat()
    assert dc.classify_nvidia_smi(out.rc, out.stdout + out.stderr) == "no_driver", out.stdout + out.stderr


def test_check_mode_on_converged_host_changes_nothing(check_run):
    assert check_run.rc == 0, check_run.output[-3000:]
    assert check_run.recap
    for host, counts in check_run.recap.items():
        assert counts["changed"] == 0, f"{host}: {counts}\n{check_run.output[-4000:]}"


def test_branch_too_old_for_planned_image_is_refused(converge_playbook):
    run = run_playbook(converge_playbook, "-e", '{"nvidia_driver_image_cuda_version": "12.9"}')
    assert run.rc != 0
    assert "driver R535 supports CUDA up to 12.2 but the planned image needs CUDA 12.9" in run.output
    assert "pin nvidia_driver_branch to 575" in run.output


def test_cuda_repo_and_fabric_manager_paths_in_check_mode(host, converge_playbook):
    """NVIDIA's CUDA repository is unreachable here: exercise that path with --check --diff."""
    extra = (
        '{"nvidia_driver_source": "cuda_repo", "nvidia_driver_branch": "580",'
        ' "nvidia_driver_image_cuda_version": "13.0", "nvidia_driver_nvswitch": true,'
        ' "nvidia_driver_version": "580.95.05-1",'
        ' "nvidia_driver_cuda_repo_url": "http://127.0.0.1:9/cuda-mirror",'
        ' "nvidia_driver_cuda_repo_key": "/usr/share/keyrings/debian-archive-keyring.gpg"}'
    )
    run = run_playbook(converge_playbook, "--check", "--diff", "-v", "-e", extra)
    assert run.rc == 0, run.output[-4000:]
    assert "http://127.0.0.1:9/cuda-mirror/debian12/x86_64/" in run.output
    assert "cuda-drivers-580" in run.output
    assert "nvidia-fabricmanager" in run.output
    # check mode wrote nothing
    assert not host.file("/etc/apt/sources.list.d/vllm-fleet-cuda.sources").exists


def test_reboot_handler_honours_the_policy(host):
    """nvidia_driver_reboot: false (the scenario) → the handler reports, the host is not rebooted."""
    boot_before = host.check_output("cat /proc/1/stat | cut -d' ' -f22")
    run = run_playbook(Path(__file__).parent / "reboot_handler.yml")
    assert run.rc == 0, run.output[-3000:]
    assert "REBOOT REQUIRED on vf-prov-nvidia_driver to load the NVIDIA driver" in " ".join(
        run.output.split()
    )
    handler = re.search(
        r"RUNNING HANDLER \[[^\]]*Reboot to load the NVIDIA driver\][^\n]*\n(?:\s*\n)*(\w+):", run.output
    )
    assert handler and handler.group(1) == "skipping", run.output[-3000:]
    assert host.check_output("cat /proc/1/stat | cut -d' ' -f22") == boot_before
