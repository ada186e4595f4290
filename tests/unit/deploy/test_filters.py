"""The vllm_deploy filter wrappers: keyword arguments pass through, errors become AnsibleFilterError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.deploy import FilterModule

FILTERS = FilterModule().filters()
PLAN = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "deploy" / "plan_cpu.json").read_text())


def test_every_filter_is_exported() -> None:
    assert set(FILTERS) == {
        "vllm_health_gate", "vllm_serial", "vllm_metric_sum", "vllm_retries", "vllm_container_env",
        "vllm_lb_servers", "vllm_lb_routing", "vllm_lb_tls_names",
    }


def test_keyword_arguments_named_like_the_wrapper_arguments_pass_through() -> None:
    assert FILTERS["vllm_health_gate"](PLAN, interval_s=5, timeout_s=None)["timeout_s"] == 601
    assert FILTERS["vllm_serial"](4, 1, "50%") == [1, 2, 1]
    assert FILTERS["vllm_retries"](10, 3) == 4


def test_metric_sum_default_for_absent_metric() -> None:
    assert FILTERS["vllm_metric_sum"]("", "vllm:num_requests_running", 0) == 0
    assert FILTERS["vllm_metric_sum"]("vllm:num_requests_running 2\n", "vllm:num_requests_running", 0) == 2.0


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("vllm_serial", [2, 0], {}),
        ("vllm_container_env", [{"container": "c"}, {"no_such_secret": "x"}], {}),
    ],
)
def test_errors_become_ansible_filter_errors(name: str, args: list[object], kwargs: dict[str, object]) -> None:
    with pytest.raises(AnsibleFilterError, match=name):
        FILTERS[name](*args, **kwargs)


def test_serial_keeps_the_example_fleets_multinode_group_in_one_batch() -> None:
    # inventories/example in play order: h200-01, then the two H100 nodes of llama405b, then l40s-01 and t4-01.
    hosts = ["h200-01", "h100-01", "h100-02", "l40s-01", "t4-01"]
    groups = [None, "llama405b", "llama405b", None, None]
    assert FILTERS["vllm_serial"](hosts, 1, 1) == [1, 1, 1, 1, 1] != FILTERS["vllm_serial"](hosts, 1, 1, groups)
    assert FILTERS["vllm_serial"](hosts, 1, 1, groups) == [1, 2, 1, 1]
    assert FILTERS["vllm_serial"](hosts, 2, 1, groups) == [3, 1, 1]  # the canary does not stop inside the group
    with pytest.raises(AnsibleFilterError, match="vllm_serial: 5 hosts but 2 multinode_groups"):
        FILTERS["vllm_serial"](hosts, 1, 1, groups[:2])
    with pytest.raises(AnsibleFilterError, match="vllm_serial: multi-node group g: its hosts"):
        FILTERS["vllm_serial"](["a", "b", "c"], 1, 1, ["g", None, "g"])


def test_serial_reads_each_hosts_group_from_preflights_launch_records() -> None:
    # `serial` is templated without host variables: deploy.yml passes the launch records preflight left on the
    # controller (no per-host group_by task).
    hosts = ["h200-01", "h100-01", "h100-02", "l40s-01", "t4-01"]
    records = {h: {"sku": "x", "multinode_group": "llama405b" if h.startswith("h100") else None} for h in hosts}
    assert FILTERS["vllm_serial"](hosts, 1, 1, records) == [1, 2, 1, 1]
    assert FILTERS["vllm_serial"](hosts, 2, 1, records) == [3, 1, 1]
    records["h100-02"]["multinode_group"] = None
    assert FILTERS["vllm_serial"](hosts, 1, 1, records) == [1, 1, 1, 1, 1]


def test_serial_reads_the_multinode_groups_of_the_inventory() -> None:
    # A play may pass `groups` instead: the hosts of each multi-node group in vllm_fleet_multinode_<name>.
    hosts = ["h200-01", "h100-01", "h100-02", "l40s-01", "t4-01"]
    groups = {"all": hosts, "vllm_servers": hosts, "gpu_h100": ["h100-01", "h100-02"],
              "vllm_fleet_multinode_llama405b": ["h100-01", "h100-02"]}
    assert FILTERS["vllm_serial"](hosts, 1, 1, groups) == [1, 2, 1, 1]
    assert FILTERS["vllm_serial"](hosts, 1, 1, {"all": hosts}) == [1, 1, 1, 1, 1]
