"""The one CUDA ↔ driver table (plugins/plugin_utils/provision/cuda_driver.py), read in both directions."""

from __future__ import annotations

from itertools import pairwise

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision import cuda_driver as cd
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision import driver as dc


def test_table_is_monotonic() -> None:
    """A newer CUDA never needs an older driver."""
    rows = sorted((cd.parse_cuda(c), cd.parse_driver_version(d)) for c, d in cd.CUDA_MIN_DRIVER.items())
    assert [d for _c, d in rows] == sorted(d for _c, d in rows)


@pytest.mark.parametrize(
    ("cuda", "version", "branch"),
    [("13.0", "580.65.06", 580), ("12.9", "575.51.03", 575), ("12.2", "535.54.03", 535), ("12.2.2", "535.54.03", 535),
     ("13.2", "595.45.04", 595), ("14.0", None, None)],
)
def test_cuda_to_min_driver(cuda: str, version: str | None, branch: int | None) -> None:
    assert cd.min_driver_version(cuda) == version
    assert cd.min_driver_branch(cuda) == branch


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [(535, (12, 2)), ("R575", (12, 9)), ("580.159.04", (13, 0)), ("580.65.06", (13, 0)), ("580.65.05", (12, 9)),
     ("590.48.01", (13, 1)), ("999.1", (13, 2)), ("470.256.02", None)],
)
def test_driver_to_max_cuda(driver: str | int, cuda: tuple[int, int] | None) -> None:
    assert cd.max_cuda_for_driver(driver) == cuda


def test_both_directions_agree() -> None:
    """Every row's own minimum driver runs that CUDA, and the driver of the row before it does not."""
    rows = sorted(cd.CUDA_MIN_DRIVER, key=cd.parse_cuda)
    for older, newer in pairwise(rows):
        assert cd.driver_runs_cuda(cd.CUDA_MIN_DRIVER[newer], newer)
        assert cd.driver_runs_cuda(cd.CUDA_MIN_DRIVER[older], older)
        assert not cd.driver_runs_cuda(cd.CUDA_MIN_DRIVER[older], newer)
    assert not cd.driver_runs_cuda("999.1", "14.0")


def test_the_roles_branches_are_derived_from_the_table() -> None:
    for branch, limit in dc.BRANCH_MAX_CUDA.items():
        assert limit == cd.max_cuda_for_driver(branch)
        assert cd.min_driver_branch((limit[0], limit[1] or 0)) == branch


def test_parse_driver_version() -> None:
    assert cd.parse_driver_version("535.261.03") == (535, 261, 3)
    assert cd.parse_driver_version("535.261.03") > cd.parse_driver_version("535.54.03")
    assert cd.parse_driver_version("R580") == (580,)
    with pytest.raises(ValueError, match="version number"):
        cd.parse_driver_version("driver-x")
