"""driver_compat: branch ↔ CUDA, packages per distribution/source, fabric manager pin, nvidia-smi states."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter import provision as flt
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision import driver as dc


@pytest.mark.parametrize(
    ("value", "branch"),
    [(535, 535), ("535", 535), ("R580", 580), ("535.261.03", 535), ("580.95.05-1", 580), (" 575 ", 575)],
)
def test_parse_branch(value, branch):
    assert dc.parse_branch(value) == branch


@pytest.mark.parametrize("value", ["", "latest", "53", "5350", "r-535", "12.2"])
def test_parse_branch_rejects(value):
    with pytest.raises(ValueError, match="driver branch"):
        dc.parse_branch(value)


@pytest.mark.parametrize(
    ("branch", "cuda", "ok"),
    [
        ("535", "12.2", True),
        ("535", "12.0", True),
        ("535", "11.8", True),
        ("535", "12.3", False),
        ("535", "12.9", False),
        ("575", "12.9", True),
        ("575", "13.0", False),
        ("570", "12.8", True),
        ("570", "12.9", False),
        ("580", "13.0", True),
        # R580 reports CUDA 13.0: a 13.2 image's NVIDIA_REQUIRE_CUDA=cuda>=13.2 refuses it (minor-version
        # compatibility is not assumed; provision/cuda_driver.py).
        ("580", "13.1", False),
        ("580", "13.2", False),
        ("580", "12.9", True),
        ("580", "14.0", False),
        ("580.95.05", "12.2.1", True),
    ],
)
def test_branch_vs_cuda(branch, cuda, ok):
    result, msg = dc.check_branch_supports_cuda(branch, cuda)
    assert result is ok
    assert f"R{dc.parse_branch(branch)}" in msg


def test_too_old_branch_message_names_the_fix():
    ok, msg = dc.check_branch_supports_cuda("535", "12.9")
    assert not ok
    assert msg == (
        "driver R535 supports CUDA up to 12.2 but the planned image needs CUDA 12.9: pin nvidia_driver_branch "
        "to 575 or newer, or plan an image built for an older CUDA"
    )
    ok, msg = dc.check_branch_supports_cuda("580", "14.0")
    assert not ok and "no known branch supports it" in msg
    ok, msg = dc.check_branch_supports_cuda("580", "13.2")
    assert not ok and "it needs driver R595 or newer, which this role does not install" in msg


def test_unknown_branch_and_bad_cuda():
    with pytest.raises(ValueError, match="not one of the supported branches"):
        dc.max_cuda_for_branch("560")
    with pytest.raises(ValueError, match="CUDA version"):
        dc.check_branch_supports_cuda("535", "twelve")


def test_table_is_monotonic():
    """A newer branch never supports less CUDA than an older one."""
    limits = [dc.BRANCH_MAX_CUDA[b] for b in sorted(dc.BRANCH_MAX_CUDA)]
    as_tuples = [(major, 99 if minor is None else minor) for major, minor in limits]
    assert as_tuples == sorted(as_tuples)
    assert dc.format_cuda((13, None)) == "13.x" and dc.format_cuda((12, 2)) == "12.2"


@pytest.mark.parametrize(
    ("distribution", "source", "branch", "version", "packages"),
    [
        ("Debian", "distro", "535", "", ["nvidia-driver", "nvidia-smi", "libnvidia-ml1"]),
        (
            "Debian",
            "distro",
            "535",
            "535.261.03-1",
            ["nvidia-driver=535.261.03-1", "nvidia-smi=535.261.03-1", "libnvidia-ml1=535.261.03-1"],
        ),
        ("Ubuntu", "distro", "535", "", ["nvidia-driver-535-server", "nvidia-utils-535-server"]),
        ("Ubuntu", "distro", "R580", "", ["nvidia-driver-580-server", "nvidia-utils-580-server"]),
        ("Ubuntu", "cuda_repo", "575", "", ["cuda-drivers-575"]),
        ("Debian", "cuda_repo", "580", "580.95.05-1", ["cuda-drivers-580=580.95.05-1"]),
    ],
)
def test_driver_packages(distribution, source, branch, version, packages):
    assert dc.driver_packages(distribution, source, branch, version) == packages


def test_driver_packages_errors():
    with pytest.raises(ValueError, match="Debian 12 non-free ships only the R535 branch"):
        dc.driver_packages("Debian", "distro", "580")
    with pytest.raises(ValueError, match="not supported"):
        dc.driver_packages("RedHat", "distro", "535")
    with pytest.raises(ValueError, match="driver source"):
        dc.driver_packages("Ubuntu", "runfile", "535")


@pytest.mark.parametrize(
    ("branch", "version", "package"),
    [
        ("535", "535.261.03-0ubuntu0.22.04.1", "nvidia-fabricmanager-535=535.261.03-*"),
        ("580", "580.95.05-1", "nvidia-fabricmanager=580.95.05-*"),
        ("575", "1:575.57.08-1", "nvidia-fabricmanager-575=575.57.08-*"),
    ],
)
def test_fabricmanager_same_version(branch, version, package):
    assert dc.fabricmanager_package(branch, version) == package


def test_fabricmanager_refuses_other_branch_or_no_version():
    with pytest.raises(ValueError, match="not of branch R580"):
        dc.fabricmanager_package("580", "575.57.08-1")
    with pytest.raises(ValueError, match="installed driver's package version"):
        dc.fabricmanager_package("580", "")


@pytest.mark.parametrize(
    ("rc", "output", "state"),
    [
        (0, "580.95.05\n580.95.05\n", "ok"),
        (
            18,
            "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95",
            "mismatch",
        ),
        (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
            "latest NVIDIA driver is installed and running.\n",
            "no_driver",
        ),
        (6, "No devices were found\n", "no_driver"),
        (127, "/bin/sh: 1: nvidia-smi: not found\n", "missing"),
        (2, "something else\n", "error"),
    ],
)
def test_classify_nvidia_smi(rc, output, state):
    assert dc.classify_nvidia_smi(rc, output) == state


def test_loaded_driver_version():
    text = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:35:06 UTC 2025\nGCC version:  gcc version 12.2.0\n"
    )
    assert dc.loaded_driver_version(text) == "580.95.05"
    assert dc.loaded_driver_version("") == ""


def test_filters_wrap_and_raise_filter_errors():
    filters = flt.FilterModule().filters()
    assert filters["nvidia_driver_cuda_check"]("535", "12.2")["ok"] is True
    assert filters["nvidia_driver_branch"]("535.261.03") == 535
    assert filters["nvidia_smi_state"]("0", "ok") == "ok"
    with pytest.raises(AnsibleFilterError, match="Debian 12 non-free"):
        filters["nvidia_driver_packages"]("Debian", "distro", "580")
    with pytest.raises(AnsibleFilterError):
        filters["nvidia_driver_cuda_check"]("999", "12.2")
    with pytest.raises(AnsibleFilterError):
        filters["nvidia_fabricmanager_package"]("580", "")


@pytest.mark.parametrize(
    ("facts", "path"),
    [
        (
            {
                "distribution": "Debian",
                "distribution_major_version": "12",
                "distribution_version": "12.11",
                "architecture": "x86_64",
            },
            "debian12/x86_64",
        ),
        (
            {
                "distribution": "Ubuntu",
                "distribution_major_version": "22",
                "distribution_version": "22.04",
                "architecture": "x86_64",
            },
            "ubuntu2204/x86_64",
        ),
        (
            {
                "distribution": "Ubuntu",
                "distribution_major_version": "24",
                "distribution_version": "24.04",
                "architecture": "aarch64",
            },
            "ubuntu2404/sbsa",
        ),
    ],
)
def test_cuda_repo_path(facts, path):
    assert dc.cuda_repo_path(facts["distribution"], facts["distribution_major_version"],
                             facts["distribution_version"], facts["architecture"]) == path


def test_cuda_repo_path_errors():
    with pytest.raises(ValueError, match="architecture"):
        dc.cuda_repo_path("Ubuntu", "22", "22.04", "ppc64le")
    with pytest.raises(ValueError, match="not supported"):
        dc.cuda_repo_path("Rocky", "9", "9.4", "x86_64")


def test_cuda_repo_source_defaults_to_nvidias_key_next_to_the_packages_and_takes_a_mirrors_key():
    facts = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.7",
             "architecture": "x86_64"}
    source = flt.FilterModule().filters()["nvidia_cuda_repo_source"]
    assert source(facts, "https://example.invalid/cuda/repos") == {
        "uri": "https://example.invalid/cuda/repos/debian12/x86_64/",
        "signed_by": "https://example.invalid/cuda/repos/debian12/x86_64/3bf863cc.pub",
    }
    assert source(facts, "http://127.0.0.1:9/repos/", "/etc/keys/mirror.asc") == {
        "uri": "http://127.0.0.1:9/repos/debian12/x86_64/", "signed_by": "/etc/keys/mirror.asc"}
