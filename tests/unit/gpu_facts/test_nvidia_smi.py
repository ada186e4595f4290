"""The pure nvidia-smi / host parsers (plugins/module_utils/nvidia_smi.py) on every fixture and on bad input."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils import nvidia_smi as n
from hypothesis import given, settings
from hypothesis import strategies as st

from ._gpu_fixtures import NEW_GPU_KEYS, fixture_names, load_json, read

FACTS_FIXTURES = fixture_names("facts")
ERROR_FIXTURES = fixture_names("error")
H100_ROW = (
    "0, GPU-74106407-f32f-0663-90a7-a1acf7eb04ae, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 81559, 0, 81008, "
    "9.0, 550.127.05, Enabled, 700.00, 1980, 2619, Disabled, Enabled"
)


def facts_from_fixture(name: str) -> dict[str, Any]:
    """What the module computes from a fixture's raw outputs (without Ansible)."""
    meta = load_json(name, "meta.json")
    meminfo = read(name, "meminfo.txt")
    assert meminfo is not None
    host = n.build_host_facts(
        meminfo, read(name, "nproc.txt"), read(name, "lscpu.txt"), read(name, "node-online.txt"), "x86_64"
    )
    if meta.get("nvidia_smi") is False:
        return n.empty_facts(host)
    query = read(name, "query-gpu.csv")
    assert query is not None
    n.check_nvidia_smi_result(meta["rc"].get("query-gpu", 0), query, "")
    return n.build_facts(
        query, host, read(name, "nvidia-smi.txt"), read(name, "topo.txt"), read(name, "list.txt"),
        pcie=read(name, "nvidia-smi-q.txt"), kernel_log=read(name, "dmesg.txt"),
    )


def test_every_sku_the_brief_names_has_a_fixture() -> None:
    assert {
        "h200x2",
        "h200_device",
        "h100_device",
        "h100x8_nvswitch",
        "a100_40gb_x4",
        "a100_80gb_x8",
        "l40s_x4_pcie",
        "l4_x1",
        "t4_x1",
        "a100_80gb_mig",
        "cpu_only",
    } <= set(FACTS_FIXTURES)
    assert {"driver_mismatch", "no_devices", "garbage", "driver_not_loaded"} <= set(ERROR_FIXTURES)


@pytest.mark.parametrize("name", FACTS_FIXTURES)
def test_fixture_parses_to_expected_facts(name: str) -> None:
    facts = facts_from_fixture(name)
    assert facts == load_json(name, "expected_facts.json")
    assert n.validate_facts(facts) == facts


@pytest.mark.parametrize("name", ERROR_FIXTURES)
def test_failure_fixture_gives_a_clear_error(name: str) -> None:
    expected = load_json(name, "expected_error.json")
    with pytest.raises(n.GpuFactsError) as err:
        facts_from_fixture(name)
    message = str(err.value)
    for part in expected["message_contains"]:
        assert part in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("name", "interconnect", "domains", "nvswitch"),
    [
        ("h100x8_nvswitch", "nvswitch", [[0, 1, 2, 3, 4, 5, 6, 7]], True),
        ("a100_40gb_x4", "nvswitch", [[0, 1, 2, 3]], True),
        ("a100_80gb_x8", "nvswitch", [[0, 1, 2, 3, 4, 5, 6, 7]], True),
        ("h200x2", "nvlink", [[0, 1]], False),
        ("h200_device", "nvlink", [[0, 1]], False),
        ("l40s_x4_pcie", "pcie", [], False),
        ("l4_x1", None, [], False),
        ("t4_x1", None, [], False),
        ("cpu_only", None, [], False),
    ],
)
def test_interconnect_per_fixture(
    name: str, interconnect: str | None, domains: list[list[int]], nvswitch: bool
) -> None:
    facts = facts_from_fixture(name)
    assert (facts["interconnect"], facts["nvlink_domains"], facts["nvswitch"]) == (
        interconnect,
        domains,
        nvswitch,
    )


def test_real_h200_capture_values() -> None:
    for name in ("h200x2", "h200_device"):
        facts = facts_from_fixture(name)
        assert facts["gpu_count"] == 2
        assert facts["gpu_name"] == "NVIDIA H200"
        assert facts["driver_version"] == "580.159.04"
        assert facts["cuda_version"] == "13.0"
        assert [gpu["memory_total_mib"] for gpu in facts["gpus"]] == [143771, 143771]
        assert [gpu["compute_capability"] for gpu in facts["gpus"]] == ["9.0", "9.0"]
        assert facts["host"]["memory_total_mib"] == 263998500 // 1024
        assert facts["host"]["cpu_cores"] == 32


def test_device_capture_matches_the_module_run_there() -> None:
    """tests/fixtures/gpu/h200_device: the module ran through Ansible on the GPU machine; parsing its raw
    outputs here must give what it returned there (normal run and --check run)."""
    facts = facts_from_fixture("h200_device")
    normal = load_json("h200_device", "module_result.json")
    check = load_json("h200_device", "module_result_check.json")
    assert normal["changed"] is False and check["changed"] is False
    assert normal["source"] == check["source"] == "nvidia-smi"
    # The module there predates the PCIe link and Xid keys (it ran no -q and read no kernel log).
    for gpu in facts["gpus"]:
        for key in NEW_GPU_KEYS:
            del gpu[key]
    assert normal["ansible_facts"]["gpu"] == facts
    assert check["ansible_facts"]["gpu"]["gpus"] == facts["gpus"]
    assert normal["raw"]["query_gpu"] == read("h200_device", "query-gpu.csv")
    assert normal["raw"]["topo"] == read("h200_device", "topo.txt")


def test_real_h100_capture_reads_the_pcie_link_from_the_full_query() -> None:
    """tests/fixtures/gpu/h100_device (real, 2026-12-06): driver 580 refuses ``nvidia-smi -q -d PCIE`` (PCIE is no
    --display type), so the module asks for the whole ``-q``, whose PCI section has the link: gen 5 of 5, x16 of x16,
    no replays; the kernel log's NVRM lines hold no Xid."""
    assert n.PCIE_ARGS == ("-q",)
    assert read("h100_device", "nvidia-smi-q-pcie.txt").startswith("Failed to parse --display/-d flags")
    facts = facts_from_fixture("h100_device")
    (gpu,) = facts["gpus"]
    assert (gpu["name"], gpu["memory_total_mib"], gpu["compute_capability"]) == ("NVIDIA H100 80GB HBM3", 81559, "9.0")
    link = {key: gpu[key] for key in NEW_GPU_KEYS}
    assert link == {"pcie_link_gen_max": 5, "pcie_link_gen_current": 5, "pcie_link_width_max": 16,
                    "pcie_link_width_current": 16, "pcie_replays": 1, "xid_errors": 0, "xid_codes": []}
    assert n.parse_pcie_links(read("h100_device", "nvidia-smi-q-pcie.txt") or "") == {}
    # The fixed module ran there through Ansible on these raw outputs: the same facts, PCIe link included.
    normal = load_json("h100_device", "module_result.json")
    check = load_json("h100_device", "module_result_check.json")
    assert normal["changed"] is False and check["changed"] is False
    assert normal["ansible_facts"]["gpu"] == facts
    assert check["ansible_facts"]["gpu"]["gpus"] == facts["gpus"]
    assert normal["raw"]["pcie"] == read("h100_device", "nvidia-smi-q.txt")


def test_mig_fixture() -> None:
    facts = facts_from_fixture("a100_80gb_mig")
    assert facts["mig_enabled"] is True
    assert facts["gpus"][0]["mig_mode"] == "Enabled"
    assert [(d["profile"], d["compute_slices"], d["memory_gb"]) for d in facts["mig_devices"]] == [
        ("3g.40gb", 3, 40),
        ("2g.20gb", 2, 20),
        ("1g.10gb", 1, 10),
        ("1g.10gb", 1, 10),
    ]
    assert all(d["uuid"].startswith("MIG-") and d["gpu"] == 0 for d in facts["mig_devices"])


def test_not_available_values_become_null() -> None:
    t4 = facts_from_fixture("t4_x1")["gpus"][0]
    assert t4["mig_mode"] is None  # "[N/A]" on a T4
    assert t4["compute_capability"] == "7.5"
    row = H100_ROW.replace("700.00", "[N/A]").replace("Enabled, 700", "[Not Supported], 700")
    gpu = n.parse_query_gpu(row)[0]
    assert gpu["power_limit_w"] is None


# ----------------------------------------------------------------------------- --query-gpu


def test_query_gpu_header_units_and_infrom_warning_are_accepted() -> None:
    header = "index, uuid, name, pci.bus_id, memory.total [MiB], memory.used [MiB], memory.free [MiB], x\n"
    with_units = H100_ROW.replace("81559, 0, 81008", "81559 MiB, 0 MiB, 81008 MiB").replace(
        "700.00", "700.00 W"
    )
    warning = "WARNING: infoROM is corrupted at gpu 0000:18:00.0\n"
    for text in (H100_ROW, header + H100_ROW, with_units, warning + H100_ROW + "\n", H100_ROW + "\r\n"):
        gpu = n.parse_query_gpu(text)[0]
        assert (gpu["memory_total_mib"], gpu["memory_free_mib"], gpu["power_limit_w"]) == (
            81559,
            81008,
            700.0,
        )


def test_query_gpu_sorts_by_index_and_types() -> None:
    second = H100_ROW.replace("0, GPU-7410", "1, GPU-7410", 1).replace(":18:", ":2A:")
    gpus = n.parse_query_gpu(second + "\n" + H100_ROW)
    assert [gpu["index"] for gpu in gpus] == [0, 1]
    gpu = gpus[0]
    assert isinstance(gpu["persistence_mode"], bool) and gpu["persistence_mode"] is True
    assert isinstance(gpu["power_limit_w"], float)
    assert gpu["sm_clock_max_mhz"] == 1980 and gpu["memory_clock_max_mhz"] == 2619


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        ("\n\n", "empty output"),
        (H100_ROW.rsplit(",", 3)[0], "12 columns, expected 15"),
        (H100_ROW + ", extra", "16 columns, expected 15"),
        (H100_ROW.replace("GPU-74106407", "GPU-zz"), "is not a GPU UUID"),
        (H100_ROW.replace("00000000:18:00.0", "18:00"), "is not a PCI bus id"),
        (H100_ROW.replace("81559", "lots"), "memory.total is 'lots', not a number"),
        (H100_ROW.replace("81559", "[N/A]"), "memory.total is None"),
        (H100_ROW.replace(" 9.0,", " sm90,"), "compute capability 'sm90'"),
        (H100_ROW.replace("700.00", "seven"), "power.limit is 'seven'"),
        (H100_ROW.replace("NVIDIA H100 80GB HBM3", "[N/A]"), "no GPU name"),
        (H100_ROW.replace("0, GPU", "-1, GPU", 1), "no GPU index"),
        (H100_ROW + "\n" + H100_ROW, "lists GPU index [0, 0] twice"),
        ("<html><body>502 Bad Gateway</body></html>", "not the CSV"),
        ("\x00\x01\x02binary", "not the CSV"),
    ],
)
def test_query_gpu_garbage(text: str, message: str) -> None:
    with pytest.raises(n.GpuFactsError, match=None) as err:
        n.parse_query_gpu(text)
    assert message in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_query_gpu_never_raises_anything_but_gpu_facts_error(text: str) -> None:
    with contextlib.suppress(n.GpuFactsError):
        n.parse_query_gpu(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("GPUNIC0123 \tXNVSYPIXODE\n\x1b[4m")), max_size=300))
def test_topology_never_raises_anything_but_gpu_facts_error(text: str) -> None:
    with contextlib.suppress(n.GpuFactsError):
        n.parse_topology(text)


# ----------------------------------------------------------------------------- topo -m


def test_topology_of_the_real_capture_strips_ansi() -> None:
    text = read("h200x2", "topo.txt")
    assert text is not None and "\x1b[4m" in text
    assert n.parse_topology(text) == {0: {1: "NV18"}, 1: {0: "NV18"}}


def test_topology_ignores_nic_rows_and_columns() -> None:
    text = read("h100x8_nvswitch", "topo.txt")
    assert text is not None and "NIC0" in text
    matrix = n.parse_topology(text)
    assert sorted(matrix) == list(range(8))
    assert {cell for row in matrix.values() for cell in row.values()} == {"NV18"}


def test_topology_without_tabs_parses_the_same() -> None:
    text = read("l40s_x4_pcie", "topo.txt")
    assert text is not None
    spaced = text.replace("\t", "   ")
    assert n.parse_topology(spaced) == n.parse_topology(text)
    assert n.parse_topology(text)[0] == {1: "NODE", 2: "SYS", 3: "SYS"}


def test_single_gpu_topology() -> None:
    text = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-7\t0\t\tN/A\n\nLegend:\n"
    assert n.parse_topology(text) == {0: {}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no GPU matrix"),
        ("Legend:\n  X = Self\n", "no GPU matrix"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV\t0-31\nGPU1\tNV18\t X \t0-31\n", "'NV', not X/NV#"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-31\nGPU1\tX\tNV18\t0-31\n", "GPU1→GPU0 is 'X'"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV18\t X \t0-31\n", "row GPU0 has 1 cells"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-31\n", "columns [0, 1] and rows [0] differ"),
    ],
)
def test_topology_garbage(text: str, message: str) -> None:
    with pytest.raises(n.GpuFactsError) as err:
        n.parse_topology(text)
    assert message in str(err.value)


def full(n_gpus: int, cell: str) -> dict[int, dict[int, str]]:
    return {i: {j: cell for j in range(n_gpus) if j != i} for i in range(n_gpus)}


@pytest.mark.parametrize(
    ("matrix", "caps", "expected"),
    [
        (full(2, "NV18"), {0: "9.0", 1: "9.0"}, ("nvlink", [[0, 1]], False)),
        (full(8, "NV18"), {i: "9.0" for i in range(8)}, ("nvswitch", [list(range(8))], True)),
        # HGX A100 4-GPU board: 4 links to each of 3 peers = 12, all the links an A100 has: direct NVLink.
        (full(4, "NV4"), {i: "8.0" for i in range(4)}, ("nvlink", [[0, 1, 2, 3]], False)),
        (full(4, "NV12"), {i: "8.0" for i in range(4)}, ("nvswitch", [[0, 1, 2, 3]], True)),
        # Unknown compute capability: NVLink 4 (18 links) assumed.
        (full(4, "NV6"), None, ("nvlink", [[0, 1, 2, 3]], False)),
        (full(4, "PHB"), None, ("pcie", [], False)),
        ({0: {}}, None, (None, [], False)),
    ],
)
def test_analyse_interconnect(
    matrix: dict[int, dict[int, str]], caps: dict[int, str] | None, expected: tuple[Any, ...]
) -> None:
    assert n.analyse_interconnect(matrix, caps) == expected


def test_nvlink_bridged_pairs_are_two_domains_over_pcie() -> None:
    # 4x A100 PCIe with NVLink bridges on pairs (0,1) and (2,3).
    matrix = full(4, "SYS")
    for a, b in ((0, 1), (2, 3)):
        matrix[a][b] = matrix[b][a] = "NV12"
    assert n.analyse_interconnect(matrix, {i: "8.0" for i in range(4)}) == ("pcie", [[0, 1], [2, 3]], False)


def test_partial_mesh_is_split_into_fully_linked_groups() -> None:
    # DGX-1 (V100) hybrid cube-mesh: 0-3 and 4-7 fully linked, plus i <-> i+4.
    matrix = full(8, "SYS")
    for group in ((0, 1, 2, 3), (4, 5, 6, 7)):
        for a in group:
            for b in group:
                if a != b:
                    matrix[a][b] = "NV1"
    for i in range(4):
        matrix[i][i + 4] = matrix[i + 4][i] = "NV2"
    interconnect, domains, nvswitch = n.analyse_interconnect(matrix, {i: "7.0" for i in range(8)})
    assert (interconnect, domains, nvswitch) == ("pcie", [[0, 1, 2, 3], [4, 5, 6, 7]], False)


def test_max_nvlinks_per_gpu() -> None:
    assert [n.max_nvlinks_per_gpu(cc) for cc in ("7.0", "8.0", "9.0", "10.0", None, "8.9")] == [
        6,
        12,
        18,
        18,
        18,
        18,
    ]


def test_build_facts_needs_a_matching_topology() -> None:
    query = read("h100x8_nvswitch", "query-gpu.csv")
    host = {"memory_total_mib": 1, "cpu_cores": 1, "numa_nodes": 1, "architecture": "x86_64"}
    assert query is not None
    with pytest.raises(n.GpuFactsError, match="no `nvidia-smi topo -m` output"):
        n.build_facts(query, host)
    with pytest.raises(n.GpuFactsError, match=r"topo -m shows GPUs \[0, 1\] but --query-gpu lists \[0, 1, 2"):
        n.build_facts(query, host, topo=read("h200x2", "topo.txt"))


def test_mixed_host_has_no_single_gpu_name() -> None:
    other = H100_ROW.replace("0, GPU-7410", "1, GPU-7410", 1).replace("NVIDIA H100 80GB HBM3", "NVIDIA L40S")
    topo = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-7\nGPU1\tSYS\t X \t0-7\n"
    host = {"memory_total_mib": 1, "cpu_cores": 1, "numa_nodes": 1, "architecture": "x86_64"}
    facts = n.build_facts(H100_ROW + "\n" + other, host, topo=topo)
    assert facts["gpu_name"] is None
    assert [gpu["name"] for gpu in facts["gpus"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA L40S"]
    assert facts["interconnect"] == "pcie"


def test_two_driver_versions_on_one_host_are_refused() -> None:
    other = H100_ROW.replace("0, GPU-7410", "1, GPU-7410", 1).replace("550.127.05", "535.183.01")
    topo = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-7\nGPU1\tSYS\t X \t0-7\n"
    with pytest.raises(n.GpuFactsError, match="several driver versions"):
        n.build_facts(H100_ROW + "\n" + other, {}, topo=topo)


# ----------------------------------------------------------------------------- versions, MIG list


@pytest.mark.parametrize(
    ("name", "filename", "cuda", "driver"),
    [
        ("h200x2", "nvidia-smi.txt", "13.0", "580.159.04"),
        ("h200x2", "nvidia-smi-q.xml", "13.0", "580.159.04"),
        ("h200_device", "nvidia-smi-q.txt", "13.0", "580.159.04"),
        ("t4_x1", "nvidia-smi.txt", "12.2", "535.261.03"),
        ("l40s_x4_pcie", "nvidia-smi.txt", "12.6", "560.35.03"),
        ("no_devices", "nvidia-smi.txt", None, None),
    ],
)
def test_cuda_and_driver_version(name: str, filename: str, cuda: str | None, driver: str | None) -> None:
    text = read(name, filename)
    assert text is not None
    assert n.parse_cuda_version(text) == cuda
    assert n.parse_driver_version(text) == driver


def test_mig_list_without_mig_and_garbage() -> None:
    text = read("h200_device", "list.txt")
    assert text is not None
    assert n.parse_mig_devices(text) == []
    with pytest.raises(n.GpuFactsError, match="unexpected line"):
        n.parse_mig_devices("  MIG 1g.10gb     Device  0: (UUID: MIG-52588698-8ae1-e03f-fb34-66b83b080c09)\n")
    with pytest.raises(n.GpuFactsError, match="unexpected line"):
        n.parse_mig_devices("something else\n")


# ----------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("rc", "stdout", "parts"),
    [
        (18, "Failed to initialize NVML: Driver/library version mismatch\n", ["rc 18", "reboot"]),
        (6, "No devices were found\n", ["rc 6", "sees no GPU"]),
        (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            ["modprobe nvidia"],
        ),
        (4, "Failed to initialize NVML: Insufficient Permissions\n", ["become: true"]),
        (
            12,
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. NVML Shared Library Not Found",
            ["libnvidia-ml"],
        ),
        (
            15,
            "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system",
            ["Xid 79"],
        ),
        (255, "", ["rc 255", "(no output)", "NVIDIA driver is installed"]),
    ],
)
def test_diagnose_failure(rc: int, stdout: str, parts: list[str]) -> None:
    message = n.diagnose_failure(rc, stdout, "", "nvidia-smi --query-gpu")
    assert message.startswith(f"nvidia-smi --query-gpu failed (rc {rc}): ")
    for part in parts:
        assert part in message
    with pytest.raises(n.GpuFactsError):
        n.check_nvidia_smi_result(rc, stdout, "")


def test_real_invalid_field_message_from_the_gpu_machine() -> None:
    text = read("h200_device", "invalid-field.txt")
    assert text is not None and "is not a valid field to query" in text
    message = n.diagnose_failure(2, text, "")
    assert "compute_cap needs driver 510" in message


def test_known_failure_text_with_rc_zero_is_still_a_failure() -> None:
    with pytest.raises(n.GpuFactsError, match="sees no GPU"):
        n.check_nvidia_smi_result(0, "No devices were found\n", "")
    n.check_nvidia_smi_result(0, H100_ROW, "")


# ----------------------------------------------------------------------------- host


def test_host_parsers() -> None:
    assert n.parse_meminfo("MemTotal:       263998500 kB\nMemFree: 1 kB\n") == 257811
    assert n.parse_nproc("32\n") == 32
    assert n.parse_cpu_list("0-1,4,6-7\n") == 5
    assert n.parse_cpu_list("0") == 1
    cpu = n.parse_lscpu(read("h100x8_nvswitch", "lscpu.txt") or "")
    assert cpu == {
        "architecture": "x86_64",
        "cpus": 224,
        "numa_nodes": 2,
        "model_name": "Intel(R) Xeon(R) Platinum 8480C",
        "sockets": 2,
        "cores_per_socket": 56,
        "threads_per_core": 2,
    }


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: n.parse_meminfo("MemFree: 1 kB\n"), "no 'MemTotal"),
        (lambda: n.parse_nproc("many"), "not a CPU count"),
        (lambda: n.parse_nproc("0"), "not a CPU count"),
        (lambda: n.parse_cpu_list("3-1"), "not a CPU/node list"),
        (lambda: n.parse_cpu_list("a"), "not a CPU/node list"),
        (lambda: n.parse_cpu_list(""), "empty"),
        (lambda: n.build_host_facts("MemTotal: 1024 kB\n"), "no CPU count"),
    ],
)
def test_host_parser_errors(call: Any, message: str) -> None:
    with pytest.raises(n.GpuFactsError) as err:
        call()
    assert message in str(err.value)


def test_host_facts_sources_and_precedence() -> None:
    meminfo = "MemTotal: 2048 kB\n"
    lscpu = "Architecture: aarch64\nCPU(s): 72\nNUMA node(s): 4\nModel name: Neoverse-V2\n"
    assert n.build_host_facts(meminfo, None, lscpu) == {
        "memory_total_mib": 2,
        "cpu_cores": 72,
        "numa_nodes": 4,
        "architecture": "aarch64",
        "cpu_model": "Neoverse-V2",
    }
    facts = n.build_host_facts(meminfo, "16\n", lscpu, "0-1\n", "x86_64")
    assert (facts["cpu_cores"], facts["numa_nodes"], facts["architecture"]) == (16, 2, "x86_64")
    plain = n.build_host_facts(meminfo, "2")
    assert plain == {"memory_total_mib": 2, "cpu_cores": 2, "numa_nodes": 1, "architecture": None}


# ----------------------------------------------------------------------------- recorded facts


def test_validate_accepts_module_results_and_wrappers() -> None:
    facts = load_json("h100x8_nvswitch", "expected_facts.json")
    assert n.validate_facts({"gpu": facts}) == facts
    assert n.validate_facts({"ansible_facts": {"gpu": facts}}) == facts
    assert n.validate_facts(load_json("h200_device", "module_result.json"))["gpu_count"] == 2
    legacy = dict(facts)
    del legacy["mig_devices"]
    assert n.validate_facts(legacy)["mig_devices"] == []


def _broken(change: Any) -> dict[str, Any]:
    facts: dict[str, Any] = load_json("h200x2", "expected_facts.json")
    change(facts)
    return facts


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        ([], "expected a JSON object, got list"),
        (_broken(lambda f: f.pop("gpus")), "missing key 'gpus'"),
        (_broken(lambda f: f.update(gpu_count=True)), "'gpu_count' is True"),
        (_broken(lambda f: f.update(gpu_count="2")), "'gpu_count' is '2' (str), expected int"),
        (_broken(lambda f: f.update(gpu_count=3)), "gpu_count is 3 but 2 GPUs are listed"),
        (_broken(lambda f: f.update(interconnect="infiniband")), "interconnect 'infiniband'"),
        (_broken(lambda f: f.update(nvlink_domains=[[0, 5]])), "nvlink domain [0, 5]"),
        (_broken(lambda f: f["host"].pop("cpu_cores")), "host: missing key 'cpu_cores'"),
        (_broken(lambda f: f["gpus"][1].update(memory_total_mib="141 GB")), "gpus[1]: 'memory_total_mib'"),
        (_broken(lambda f: f["gpus"][0].update(compute_capability="sm_90")), "compute_capability 'sm_90'"),
        (_broken(lambda f: f["gpus"].__setitem__(0, "GPU0")), "gpus[0] is not an object"),
    ],
)
def test_validate_rejects_bad_facts(facts: Any, message: str) -> None:
    with pytest.raises(n.GpuFactsError) as err:
        n.validate_facts(facts, "facts.json")
    assert message in str(err.value)
    assert str(err.value).startswith("facts.json")


def test_pcie_link_from_the_real_h200_capture_and_a_link_trained_narrow() -> None:
    """nvidia-smi -q's "GPU Link Info" (real: h200_device, driver 580.159.04): Max/Current generation, width and
    replays per bus id. The same text with GPU 1's current width 8x (a riser or slot fault) reads 8."""
    text = read("h200_device", "nvidia-smi-q.txt")
    assert text is not None
    assert n.parse_pcie_links(text) == {
        "00000000:00:06.0": {"pcie_link_gen_max": 5, "pcie_link_gen_current": 5, "pcie_link_width_max": 16,
                             "pcie_link_width_current": 16, "pcie_replays": 1},
        "00000000:00:07.0": {"pcie_link_gen_max": 5, "pcie_link_gen_current": 5, "pcie_link_width_max": 16,
                             "pcie_link_width_current": 16, "pcie_replays": 4}}  # fmt: skip
    second = text.index("GPU 00000000:00:07.0")
    width = text.index("Link Width", second)
    cut = text.index("Current", width)
    narrow = text[:cut] + text[cut:].replace("16x", "8x", 1)
    assert n.parse_pcie_links(narrow)["00000000:00:07.0"]["pcie_link_width_current"] == 8
    assert n.parse_pcie_links(narrow)["00000000:00:06.0"]["pcie_link_width_current"] == 16
    assert n.parse_pcie_links("Invalid combination of input arguments.") == {}


def test_xid_lines_are_counted_per_gpu_and_an_unreadable_kernel_log_is_unknown() -> None:
    """Real kernel lines (tests/fixtures/gpu/h100x8_nvswitch/dmesg.txt: leptonai/gpud pull request 46, NVIDIA/
    open-gpu-kernel-modules issue 1150): "PCI:0000:ba:00" is the GPU at 00000000:BA:00.0; other devices' lines
    are left out. No Xid line: 0. A kernel log that could not be read: None (unknown), never 0."""
    log = read("h100x8_nvswitch", "dmesg.txt")
    assert log is not None
    found = n.parse_xid_log(log, ["00000000:BA:00.0", "00000000:18:00.0"])
    assert found == {"00000000:BA:00.0": [45, 45], "00000000:18:00.0": []}
    query = read("l4_x1", "query-gpu.csv")
    host = n.build_host_facts(read("l4_x1", "meminfo.txt") or "", "8", None, None, "x86_64")
    assert query is not None
    (clean,) = n.build_facts(query, host, kernel_log="")["gpus"]
    (unknown,) = n.build_facts(query, host)["gpus"]
    assert (clean["xid_errors"], clean["xid_codes"]) == (0, [])
    assert (unknown["xid_errors"], unknown["xid_codes"]) == (None, None)
    assert unknown["pcie_link_width_current"] is None
