"""What NVIDIA's DCGM exporter exports, as data, and the check that the fleet's queries only read that.

Pure Python, standard library only, no I/O. The monitoring role installs the exporter from NVIDIA's CUDA
repository (packages ``datacenter-gpu-manager-4-core`` and ``datacenter-gpu-manager-exporter``; systemd unit
``nvidia-dcgm-exporter``, which collects the fields listed in ``/etc/dcgm-exporter/default-counters.csv``).
The table below is that file's field list and the labels every GPU series carries, read from the exporter's
source (github.com/NVIDIA/dcgm-exporter, ``etc/default-counters.csv`` and ``internal/pkg/render``), keyed by
the exporter's minor release. The file is identical from 4.4.2-4.7.1 to 4.5.3-4.8.2. A dashboard panel or alert
that reads a field outside this list would show nothing on a real fleet: the unit tests refuse it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe.monitoring import series_names

#: Packages of NVIDIA's CUDA repository: the DCGM libraries the exporter links, and the exporter with its unit.
PACKAGES: tuple[str, ...] = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-exporter")
#: systemd unit the exporter package installs.
SERVICE = "nvidia-dcgm-exporter"

_DEFAULT_COUNTERS_4_7 = frozenset(
    {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)

#: Exporter minor release -> the fields its default-counters.csv collects.
DEFAULT_COUNTERS: dict[str, frozenset[str]] = {"4.7": _DEFAULT_COUNTERS_4_7, "4.8": _DEFAULT_COUNTERS_4_7}
#: Labels of every per-GPU series (MIG adds GPU_I_PROFILE / GPU_I_ID); Prometheus adds job, instance and the
#: scrape job's ``host``.
GPU_LABELS = frozenset({"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"})
SCRAPE_LABELS = frozenset({"job", "instance", "host"})


def _grouping_labels(expr: str) -> set[str]:
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        labels.update(label.strip() for label in group.split(",") if label.strip())
    return labels


def unexported(exprs: Mapping[str, str] | Iterable[str], release: str) -> dict[str, list[str]]:
    """For each expression that reads a DCGM series: the fields and grouping labels the exporter ``release``
    (``"4.8"``) does not export with its default counters. Empty when every query can return data."""
    if release not in DEFAULT_COUNTERS:
        raise KeyError(f"DCGM exporter {release}: no default-counters entry (known: {', '.join(sorted(DEFAULT_COUNTERS))})")
    fields = DEFAULT_COUNTERS[release]
    items = exprs.items() if isinstance(exprs, Mapping) else ((e, e) for e in exprs)
    problems: dict[str, list[str]] = {}
    for name, expr in items:
        used = {name for name in series_names(expr) if name.startswith("DCGM_")}
        if not used:
            continue
        missing = sorted(used - fields)
        missing += sorted(f"label {label}" for label in _grouping_labels(expr) - GPU_LABELS - SCRAPE_LABELS)
        if missing:
            problems[name] = missing
    return problems
