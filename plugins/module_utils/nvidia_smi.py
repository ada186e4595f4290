"""Parse what ``nvidia-smi`` and the Linux host report into CONTRACT 1 (``ansible_facts['gpu']``).

Pure: standard library only, typed, no I/O. Every parser takes the text a command printed (or a
file's content) and returns plain data; the Ansible module ``vllm_fleet.fleet.gpu_facts`` runs the
commands and reads the files. Bad or unexpected output raises :class:`GpuFactsError` whose message
says what was wrong and what to do; callers turn it into ``fail_json`` (never a traceback).

The commands (run with ``LC_ALL=C``)::

    nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits    -> parse_query_gpu()
    nvidia-smi                                                               -> parse_cuda_version()
    nvidia-smi topo -m            (only with 2 or more GPUs)                 -> parse_topology()
    nvidia-smi -L                 (only when a GPU has MIG enabled)          -> parse_mig_devices()
    nvidia-smi -q                 (optional: the PCIe link of each GPU)      -> parse_pcie_links()
    dmesg                         (optional: the kernel's NVRM Xid lines)    -> parse_xid_log()
    /proc/meminfo, nproc, lscpu, /sys/devices/system/node/online            -> build_host_facts()

:func:`build_facts` puts them together; :func:`validate_facts` checks a recorded facts document
(``gpu_facts`` ``facts_file``, ``vllm-fleet plan --facts``) against the same shape.

Module utilities run on the managed host: keep this file importable by Python 3.8 (annotations are
strings thanks to ``from __future__ import annotations``; no ``match``, no 3.9+ string methods).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

__all__ = [
    "LIST_ARGS",
    "PCIE_ARGS",
    "QUERY_FIELDS",
    "QUERY_GPU_ARGS",
    "TOPO_ARGS",
    "GpuFactsError",
    "analyse_interconnect",
    "build_facts",
    "build_host_facts",
    "check_nvidia_smi_result",
    "diagnose_failure",
    "empty_facts",
    "max_nvlinks_per_gpu",
    "parse_cpu_list",
    "parse_cuda_version",
    "parse_driver_version",
    "parse_lscpu",
    "parse_meminfo",
    "parse_mig_devices",
    "parse_nproc",
    "parse_pcie_links",
    "parse_query_gpu",
    "parse_topology",
    "parse_xid_log",
    "strip_ansi",
    "validate_facts",
]

#: The ``--query-gpu`` fields, in the order :func:`parse_query_gpu` expects them.
QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.free",
    "compute_cap",
    "driver_version",
    "persistence_mode",
    "power.limit",
    "clocks.max.sm",
    "clocks.max.memory",
    "mig.mode.current",
    "ecc.mode.current",
)
#: Arguments after the ``nvidia-smi`` binary for the per-GPU query.
QUERY_GPU_ARGS = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits")
#: Arguments for the GPU/NIC connection matrix.
TOPO_ARGS = ("topo", "-m")
#: Arguments for the device list (shows MIG devices).
LIST_ARGS = ("-L",)
#: Arguments for the full ``nvidia-smi -q`` whose PCI section holds each GPU's link generation and width and its
#: replays. ``-q -d PCIE`` would be shorter but PCIE is no ``--display`` type: driver 580.159.04 answers it with
#: "Failed to parse --display/-d flags" and exit 2 (tests/fixtures/gpu/h100_device/nvidia-smi-q-pcie.txt).
PCIE_ARGS = ("-q",)

# Values nvidia-smi prints for "no value" (with and without the brackets of the CSV format).
_NOT_AVAILABLE = frozenset(
    {
        "[n/a]",
        "n/a",
        "[not supported]",
        "not supported",
        "[unknown error]",
        "unknown error",
        "[insufficient permissions]",
        "",
    }
)
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
_MIG_UUID_RE = re.compile(r"^MIG-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
_BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_CC_RE = re.compile(r"^\d+\.\d+$")
_VERSION_RE = re.compile(r"^\d+(\.\d+){1,3}$")
_Q_GPU_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_Q_LINE_RE = re.compile(r"^(\s*)([^:]+?)\s*(?::\s*(.*))?$")
# The kernel's line for an Xid event: "NVRM: Xid (PCI:0000:cb:00): 13, pid=..., ..." (domain:bus:device, no
# function). Real lines: leptonai/gpud pull request 46 (dmesg), NVIDIA/open-gpu-kernel-modules issue 1150 (journal).
_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\): (\d+)")
_TOPO_CELL_RE = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_NUMBER_UNITS = (" MiB", " MHz", " W", " %")

# NVLink links per GPU by compute capability (A100: 12 NVLink3; H100/H200: 18 NVLink4;
# B200/GB200: 18 NVLink5; V100: 6 NVLink2). Used to tell an NVSwitch fabric from direct links:
# a GPU that reaches its peers over more links than it has must be going through switches.
_NVLINKS_PER_GPU = {"7.0": 6, "8.0": 12, "9.0": 18, "10.0": 18, "10.3": 18}
_DEFAULT_NVLINKS_PER_GPU = 18

# Known failure texts -> (what it means, what to do).
_KNOWN_FAILURES = (
    (
        "driver/library version mismatch",
        "the loaded NVIDIA kernel module and the user-space NVML library have different versions "
        "(the driver was upgraded without a reboot)",
        "reboot the host (or unload and reload the nvidia kernel modules) so that the running driver "
        "matches the installed libraries",
    ),
    (
        "no devices were found",
        "the NVIDIA driver is loaded but it sees no GPU",
        "check `lspci -d 10de:` and the kernel log (`dmesg | grep -i nvidia`); a GPU that fell off the bus "
        "or is bound to another driver (vfio-pci) is not visible",
    ),
    (
        "couldn't communicate with the nvidia driver",
        "the NVIDIA kernel module is not loaded",
        "install the driver (role vllm_fleet.fleet.nvidia_driver) and reboot, or `modprobe nvidia`",
    ),
    (
        "gpu is lost",
        "a GPU has fallen off the bus",
        "reboot the host; if it happens again, drain it and check the hardware (`dmesg` shows Xid 79)",
    ),
    (
        "insufficient permissions",
        "the user running nvidia-smi may not open the NVIDIA device files",
        "run the task with become: true or fix the permissions of /dev/nvidia*",
    ),
    (
        "nvml shared library",
        "libnvidia-ml.so cannot be loaded",
        "install the driver's user-space libraries (package libnvidia-ml1 / nvidia-utils) that match the kernel module",
    ),
    (
        "is not a valid field to query",
        "this nvidia-smi does not know one of the queried fields (compute_cap needs driver 510 or newer)",
        "upgrade the NVIDIA driver to a supported branch (535 or newer)",
    ),
)


class GpuFactsError(ValueError):
    """nvidia-smi or the host reported something that cannot be turned into GPU facts."""


# --------------------------------------------------------------------------------------------
# Failures


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (``nvidia-smi topo -m`` underlines its header with them)."""
    return _ANSI_RE.sub("", text)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def diagnose_failure(rc: int, stdout: str, stderr: str, command: str = "nvidia-smi") -> str:
    """Return a one-paragraph message for a failed nvidia-smi run.

    :param rc: the exit status (6: no devices, 9: driver not loaded, 18: driver/library mismatch).
    :param stdout: what it printed (nvidia-smi prints most errors on stdout).
    :param stderr: what it printed on stderr.
    :param command: the command line, for the message.
    :returns: ``"<command> failed (rc N): <its first line>. This means ...; <what to do>."``
    """
    text = (stdout + "\n" + stderr).strip()
    said = _first_line(strip_ansi(text)).rstrip(".") or "(no output)"
    lowered = text.lower()
    for needle, meaning, action in _KNOWN_FAILURES:
        if needle in lowered:
            return f"{command} failed (rc {rc}): {said}. This means {meaning}; {action}."
    return f"{command} failed (rc {rc}): {said}. Check that the NVIDIA driver is installed and working (`nvidia-smi` by hand)."


def check_nvidia_smi_result(rc: int, stdout: str, stderr: str, command: str = "nvidia-smi") -> None:
    """Raise :class:`GpuFactsError` with :func:`diagnose_failure`'s message unless ``rc`` is 0.

    A zero exit status whose output is a known failure text ("No devices were found" is printed with
    rc 6, but wrappers sometimes swallow the status) is treated as the failure too.
    """
    if rc != 0:
        raise GpuFactsError(diagnose_failure(rc, stdout, stderr, command))
    lowered = stdout.lower()
    for needle, _meaning, _action in _KNOWN_FAILURES:
        if needle in lowered and "," not in _first_line(stdout):
            raise GpuFactsError(diagnose_failure(rc, stdout, stderr, command))


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu


def _value(raw: str) -> str | None:
    value = raw.strip()
    if value.lower() in _NOT_AVAILABLE:
        return None
    for unit in _NUMBER_UNITS:
        if value.endswith(unit):
            return value[: -len(unit)].strip()
    return value


def _int(raw: str | None, field: str, line_no: int) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        try:
            as_float = float(raw)
        except ValueError:
            raise GpuFactsError(
                f"nvidia-smi --query-gpu line {line_no}: {field} is {raw!r}, not a number"
            ) from None
        return int(as_float)


def _float(raw: str | None, field: str, line_no: int) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise GpuFactsError(
            f"nvidia-smi --query-gpu line {line_no}: {field} is {raw!r}, not a number"
        ) from None


def _mode(raw: str | None) -> str | None:
    if raw is None:
        return None
    return raw[:1].upper() + raw[1:].lower()


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``.

    A header line (``--format=csv`` without ``noheader``) and units after numbers (without
    ``nounits``) are accepted too. ``[N/A]`` / ``[Not Supported]`` become ``None``.

    :returns: one dict per GPU, sorted by index, with the CONTRACT 1 per-GPU keys plus
        ``driver_version``, ``sm_clock_max_mhz`` and ``memory_clock_max_mhz``.
    :raises GpuFactsError: on output that is not that CSV (wrong column count, a non-numeric
        memory figure, a malformed UUID, bus id or compute capability, no GPU line at all).
    """
    cleaned = strip_ansi(text).replace("\r", "")
    # nvidia-smi prints "WARNING: infoROM is corrupted at gpu ..." before the CSV on affected boards.
    lines = [line for line in cleaned.splitlines() if line.strip() and not line.startswith("WARNING:")]
    if lines and lines[0].replace(" ", "").lower().startswith("index,uuid,"):
        lines = lines[1:]
    if not lines:
        raise GpuFactsError("nvidia-smi --query-gpu printed no GPU line (empty output)")
    gpus: list[dict[str, Any]] = []
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    for line_no, row in enumerate(reader, start=1):
        if len(row) != len(QUERY_FIELDS):
            raise GpuFactsError(
                "this is not the CSV nvidia-smi --query-gpu prints: "
                f"line {line_no} has {len(row)} columns, expected {len(QUERY_FIELDS)} "
                f"({','.join(QUERY_FIELDS)}); it printed: {lines[line_no - 1][:200]!r}"
            )
        raw = dict(zip(QUERY_FIELDS, (_value(cell) for cell in row)))  # noqa: B905 (lengths checked; strict= needs 3.10)
        index = _int(raw["index"], "index", line_no)
        uuid = raw["uuid"]
        name = raw["name"]
        bus_id = raw["pci.bus_id"]
        total = _int(raw["memory.total"], "memory.total", line_no)
        cc = raw["compute_cap"]
        if index is None or index < 0:
            raise GpuFactsError(f"nvidia-smi --query-gpu line {line_no}: no GPU index")
        if uuid is None or not _UUID_RE.match(uuid):
            raise GpuFactsError(
                f"nvidia-smi --query-gpu line {line_no}: {uuid!r} is not a GPU UUID (GPU-xxxxxxxx-...)"
            )
        if not name:
            raise GpuFactsError(f"nvidia-smi --query-gpu line {line_no}: no GPU name")
        if bus_id is None or not _BUS_ID_RE.match(bus_id):
            raise GpuFactsError(
                f"nvidia-smi --query-gpu line {line_no}: {bus_id!r} is not a PCI bus id (00000000:BB:DD.F)"
            )
        if total is None or total <= 0:
            raise GpuFactsError(
                f"nvidia-smi --query-gpu line {line_no}: memory.total is {raw['memory.total']!r}"
            )
        if cc is None or not _CC_RE.match(cc):
            raise GpuFactsError(
                f"nvidia-smi --query-gpu line {line_no}: compute capability {cc!r} is not MAJOR.MINOR"
            )
        persistence = raw["persistence_mode"]
        gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "name": name,
                "pci_bus_id": bus_id.upper() if bus_id else bus_id,
                "memory_total_mib": total,
                "memory_used_mib": _int(raw["memory.used"], "memory.used", line_no),
                "memory_free_mib": _int(raw["memory.free"], "memory.free", line_no),
                "compute_capability": cc,
                "persistence_mode": None if persistence is None else persistence.lower() == "enabled",
                "power_limit_w": _float(raw["power.limit"], "power.limit", line_no),
                "mig_mode": _mode(raw["mig.mode.current"]),
                "ecc_mode": _mode(raw["ecc.mode.current"]),
                "driver_version": raw["driver_version"],
                "sm_clock_max_mhz": _int(raw["clocks.max.sm"], "clocks.max.sm", line_no),
                "memory_clock_max_mhz": _int(raw["clocks.max.memory"], "clocks.max.memory", line_no),
            }
        )
    indexes = [gpu["index"] for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        raise GpuFactsError(f"nvidia-smi --query-gpu lists GPU index {sorted(indexes)} twice")
    return sorted(gpus, key=lambda gpu: int(gpu["index"]))


# --------------------------------------------------------------------------------------------
# nvidia-smi (plain table, -q text or -q -x XML): driver and CUDA version


def _find_version(text: str, patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            version = match.group(1)
            if _VERSION_RE.match(version):
                return version
    return None


def parse_cuda_version(text: str) -> str | None:
    """The ``CUDA Version`` nvidia-smi prints (the newest CUDA the driver supports), e.g. ``"13.0"``.

    Accepts the plain table header (``CUDA Version: 13.0``), ``nvidia-smi -q`` text
    (``CUDA Version : 13.0``) and ``-q -x`` XML (``<cuda_version>13.0</cuda_version>``).
    Returns ``None`` when none is printed.
    """
    return _find_version(
        strip_ansi(text),
        (r"CUDA Version\s*:\s*([0-9][0-9.]*)", r"<cuda_version>\s*([0-9][0-9.]*)\s*</cuda_version>"),
    )


def parse_driver_version(text: str) -> str | None:
    """The driver version from the same outputs as :func:`parse_cuda_version`, e.g. ``"580.159.04"``."""
    return _find_version(
        strip_ansi(text),
        (r"Driver Version\s*:\s*([0-9][0-9.]*)", r"<driver_version>\s*([0-9][0-9.]*)\s*</driver_version>"),
    )


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m


def parse_topology(text: str) -> dict[int, dict[int, str]]:
    """Parse the GPU part of ``nvidia-smi topo -m``.

    ANSI escapes are stripped; NIC rows and columns (``NIC0``, ``mlx5_0``) and the legend are
    ignored. Cells are ``X`` (self), ``NV<n>`` (a bonded set of n NVLinks) or a PCIe path
    (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; ``SOC`` on old drivers).

    :returns: ``{gpu_index: {peer_index: cell}}`` for every ordered GPU pair (self excluded).
    :raises GpuFactsError: when no matrix is found, a row is short, a cell is unknown or the
        matrix is not square.
    """
    lines = [strip_ansi(line).rstrip("\r\n") for line in text.splitlines()]
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    for line in lines:
        if line.strip().startswith("Legend"):
            break
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split("\t")] if "\t" in line else line.split()
        if header is None:
            tokens = [field for field in fields if field]
            if tokens and tokens[0] == "GPU0":
                header = []
                for token in tokens:
                    if token.startswith("CPU") or token.startswith("NUMA") or token.startswith("GPU NUMA"):
                        break
                    header.append(token)
            continue
        label = fields[0] if fields else ""
        match = re.match(r"^GPU(\d+)$", label)
        if not match:
            continue  # NIC rows, stray lines
        cells = list(fields[1:])
        if len(cells) < len(header):
            raise GpuFactsError(
                f"nvidia-smi topo -m: row {label} has {len(cells)} cells, the header names {len(header)} columns"
            )
        rows[int(match.group(1))] = cells[: len(header)]
    if header is None or not rows:
        raise GpuFactsError("nvidia-smi topo -m printed no GPU matrix (no header line starting with GPU0)")
    gpu_columns = {}
    for position, name in enumerate(header):
        match = re.match(r"^GPU(\d+)$", name)
        if match:
            gpu_columns[int(match.group(1))] = position
    if sorted(gpu_columns) != sorted(rows):
        raise GpuFactsError(
            f"nvidia-smi topo -m: the GPU columns {sorted(gpu_columns)} and rows {sorted(rows)} differ"
        )
    matrix: dict[int, dict[int, str]] = {}
    for gpu, cells in rows.items():
        matrix[gpu] = {}
        for peer, position in gpu_columns.items():
            cell = cells[position]
            if not _TOPO_CELL_RE.match(cell):
                raise GpuFactsError(
                    f"nvidia-smi topo -m: GPU{gpu}→GPU{peer} is {cell!r}, not X/NV#/PIX/PXB/PHB/NODE/SYS"
                )
            if (cell == "X") != (gpu == peer):
                raise GpuFactsError(f"nvidia-smi topo -m: GPU{gpu}→GPU{peer} is {cell!r}")
            if gpu != peer:
                matrix[gpu][peer] = cell
    return matrix


def max_nvlinks_per_gpu(compute_capability: str | None) -> int:
    """NVLink links one GPU of this compute capability has (A100 12, H100/H200 18, V100 6)."""
    if compute_capability is None:
        return _DEFAULT_NVLINKS_PER_GPU
    return _NVLINKS_PER_GPU.get(compute_capability, _DEFAULT_NVLINKS_PER_GPU)


def _nvlinks(cell: str) -> int:
    return int(cell[2:]) if cell.startswith("NV") else 0


def analyse_interconnect(
    matrix: dict[int, dict[int, str]], compute_capabilities: dict[int, str] | None = None
) -> tuple[str | None, list[list[int]], bool]:
    """Classify a ``parse_topology`` matrix.

    * ``nvlink_domains``: groups (2 GPUs or more) in which every pair is joined by NVLink, found as
      connected parts of the NVLink graph; a part that is not fully connected is split greedily
      (lowest index first) into fully connected groups.
    * ``nvswitch``: some GPU reaches its peers over more NVLinks than it has (e.g. NV18 to each of
      7 peers on an 8-GPU HGX H100; NV12 to 3 peers on A100), which only NVSwitch can do.
      Two GPUs behind NVSwitch look like a direct NVLink pair and count as ``nvlink``.
    * ``interconnect``: ``None`` for fewer than 2 GPUs; ``"nvswitch"`` / ``"nvlink"`` when one
      domain holds every GPU; otherwise ``"pcie"`` (the slowest path between some pair).

    :returns: ``(interconnect, nvlink_domains, nvswitch)``
    """
    gpus = sorted(matrix)
    if len(gpus) < 2:
        return None, [], False
    caps = compute_capabilities or {}
    linked = {gpu: {peer for peer, cell in matrix[gpu].items() if cell.startswith("NV")} for gpu in gpus}
    nvswitch = any(
        sum(_nvlinks(cell) for cell in matrix[gpu].values()) > max_nvlinks_per_gpu(caps.get(gpu))
        for gpu in gpus
    )
    domains: list[list[int]] = []
    remaining = set(gpus)
    while remaining:
        start = min(remaining)
        group = [start]
        for candidate in sorted(remaining - {start}):
            if all(candidate in linked[member] and member in linked[candidate] for member in group):
                group.append(candidate)
        remaining -= set(group)
        if len(group) >= 2:
            domains.append(group)
    if len(domains) == 1 and len(domains[0]) == len(gpus):
        interconnect = "nvswitch" if nvswitch else "nvlink"
    else:
        interconnect = "pcie"
        nvswitch = nvswitch and bool(domains)
    return interconnect, domains, nvswitch


# --------------------------------------------------------------------------------------------
# nvidia-smi -L (MIG devices)

_LIST_GPU_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_LIST_MIG_RE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-fA-F-]+)\)\s*$")
_MIG_PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb")


def _link_number(raw: str | None) -> int | None:
    """``5`` / ``16x`` -> 5 / 16; ``N/A`` and anything else -> None."""
    if raw is None:
        return None
    value = raw.strip().lower().rstrip("x")
    return int(value) if value.isdigit() else None


def parse_pcie_links(text: str) -> dict[str, dict[str, int | None]]:
    """Parse ``nvidia-smi -q -d PCIE`` (or the whole ``-q`` text): each GPU's PCIe link, by PCI bus id.

    Per GPU (the ``GPU 00000000:BB:DD.F`` block's "GPU Link Info"): ``pcie_link_gen_max`` (the most both the GPU
    and the slot allow), ``pcie_link_gen_current`` (lower while the GPU idles: nvidia-smi's field help says the
    generation "may be reduced when the GPU is not in use"), ``pcie_link_width_max``, ``pcie_link_width_current``
    (a width below the maximum is a slot, riser or cable fault, idle or not) and ``pcie_replays`` (link-level
    retransmissions since reset). Values nvidia-smi prints as ``N/A`` are ``None``.

    :returns: ``{"00000000:00:06.0": {...}}`` (bus ids upper-cased as :func:`parse_query_gpu` gives them);
        ``{}`` for text with no GPU block (an older nvidia-smi that does not know ``-d PCIE``).
    """
    links: dict[str, dict[str, int | None]] = {}
    current: dict[str, int | None] | None = None
    section: list[tuple[int, str]] = []  # (indent, name) of the headings above the line
    for raw_line in strip_ansi(text).splitlines():
        if not raw_line.strip():
            continue
        gpu = _Q_GPU_RE.match(raw_line.strip()) if not raw_line[:1].isspace() else None
        if gpu:
            current = links.setdefault(gpu.group(1).upper(), {
                "pcie_link_gen_max": None, "pcie_link_gen_current": None, "pcie_link_width_max": None,
                "pcie_link_width_current": None, "pcie_replays": None})
            section = []
            continue
        found = _Q_LINE_RE.match(raw_line.rstrip())
        if current is None or not found:
            continue
        indent, name, value = len(found.group(1)), found.group(2).strip(), found.group(3)
        while section and section[-1][0] >= indent:
            section.pop()
        if value is None:
            section.append((indent, name))
            continue
        parent = section[-1][1] if section else ""
        if parent == "PCIe Generation" and name in ("Max", "Current"):
            current["pcie_link_gen_" + name.lower()] = _link_number(value)
        elif parent == "Link Width" and name in ("Max", "Current"):
            current["pcie_link_width_" + name.lower()] = _link_number(value)
        elif name == "Replays Since Reset":
            current["pcie_replays"] = _link_number(value)
    return links


def _pci_key(domain: str, bus: str, device: str) -> tuple[int, int, int]:
    return int(domain, 16), int(bus, 16), int(device, 16)


def parse_xid_log(text: str, bus_ids: list[str]) -> dict[str, list[int]]:
    """The Xid codes the kernel logged for each GPU (``NVRM: Xid (PCI:0000:cb:00): 13, ...`` lines of ``dmesg``
    or ``journalctl -k``), by the GPUs' bus ids as :func:`parse_query_gpu` gives them (``00000000:CB:00.0``).

    :returns: every GPU of ``bus_ids`` with the codes of its lines in order (``[]``: none since boot); a line
        for a device that is not in ``bus_ids`` (a GPU gone from the bus, or another driver's) is left out.
    """
    wanted: dict[tuple[int, int, int], str] = {}
    for bus_id in bus_ids:
        domain, bus, rest = bus_id.split(":")
        wanted[_pci_key(domain, bus, rest.split(".")[0])] = bus_id
    found: dict[str, list[int]] = {bus_id: [] for bus_id in bus_ids}
    for line in text.splitlines():
        match = _XID_RE.search(line)
        if match:
            owner = wanted.get(_pci_key(match.group(1), match.group(2), match.group(3)))
            if owner is not None:
                found[owner].append(int(match.group(4)))
    return found


def parse_mig_devices(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi -L`` into the MIG devices (``[]`` when MIG is off).

    :returns: ``[{"gpu": 0, "device": 0, "profile": "3g.40gb", "uuid": "MIG-…",
        "compute_slices": 3, "memory_gb": 40}, ...]``
    :raises GpuFactsError: on a MIG line before any GPU line, or a line that is neither.
    """
    devices: list[dict[str, Any]] = []
    gpu: int | None = None
    for line in strip_ansi(text).splitlines():
        if not line.strip():
            continue
        gpu_match = _LIST_GPU_RE.match(line.strip())
        if gpu_match:
            gpu = int(gpu_match.group(1))
            continue
        mig_match = _LIST_MIG_RE.match(line)
        if not mig_match or gpu is None or not _MIG_UUID_RE.match(mig_match.group(3)):
            raise GpuFactsError(f"nvidia-smi -L: unexpected line {line[:200]!r}")
        profile = mig_match.group(1)
        size = _MIG_PROFILE_RE.match(profile)
        devices.append(
            {
                "gpu": gpu,
                "device": int(mig_match.group(2)),
                "profile": profile,
                "uuid": mig_match.group(3),
                "compute_slices": int(size.group(1)) if size else None,
                "memory_gb": int(size.group(2)) if size else None,
            }
        )
    return devices


# --------------------------------------------------------------------------------------------
# Host facts


def parse_meminfo(text: str) -> int:
    """``MemTotal`` from ``/proc/meminfo`` in MiB (``263998500 kB`` → 257811)."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB\s*$", text, re.MULTILINE)
    if not match:
        raise GpuFactsError("/proc/meminfo has no 'MemTotal: N kB' line")
    return int(match.group(1)) // 1024


def parse_nproc(text: str) -> int:
    """The number ``nproc`` prints (CPUs this process may run on)."""
    value = text.strip()
    if not value.isdigit() or int(value) < 1:
        raise GpuFactsError(f"nproc printed {value[:80]!r}, not a CPU count")
    return int(value)


def parse_cpu_list(text: str) -> int:
    """Count the members of a kernel CPU/node list such as ``0-1,4,6-7`` (→ 5)."""
    count = 0
    value = text.strip()
    if not value:
        raise GpuFactsError("empty CPU/node list")
    for part in value.split(","):
        bounds = part.strip().split("-")
        if len(bounds) == 1 and bounds[0].isdigit():
            count += 1
        elif (
            len(bounds) == 2
            and bounds[0].isdigit()
            and bounds[1].isdigit()
            and int(bounds[0]) <= int(bounds[1])
        ):
            count += int(bounds[1]) - int(bounds[0]) + 1
        else:
            raise GpuFactsError(f"{value[:80]!r} is not a CPU/node list (like 0-1,3)")
    return count


def parse_lscpu(text: str) -> dict[str, Any]:
    """The fields of ``lscpu`` we use: ``architecture``, ``cpus``, ``numa_nodes``, ``model_name``,
    ``sockets``, ``cores_per_socket``, ``threads_per_core`` (``None`` when a line is missing)."""
    fields: dict[str, str] = {}
    for line in strip_ansi(text).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())

    def number(key: str) -> int | None:
        value = fields.get(key, "")
        return int(value) if value.isdigit() else None

    return {
        "architecture": fields.get("Architecture") or None,
        "cpus": number("CPU(s)"),
        "numa_nodes": number("NUMA node(s)"),
        "model_name": fields.get("Model name") or None,
        "sockets": number("Socket(s)"),
        "cores_per_socket": number("Core(s) per socket"),
        "threads_per_core": number("Thread(s) per core"),
    }


def build_host_facts(
    meminfo: str,
    nproc: str | None = None,
    lscpu: str | None = None,
    node_online: str | None = None,
    architecture: str | None = None,
) -> dict[str, Any]:
    """The CONTRACT 1 ``host`` block.

    :param meminfo: content of ``/proc/meminfo``.
    :param nproc: output of ``nproc``; without it, ``CPU(s)`` from lscpu.
    :param lscpu: output of ``lscpu`` (optional).
    :param node_online: content of ``/sys/devices/system/node/online`` (``0-1``); without it,
        ``NUMA node(s)`` from lscpu, else 1.
    :param architecture: ``uname -m``; wins over lscpu's ``Architecture``.
    """
    cpu = parse_lscpu(lscpu) if lscpu else {}
    cores = parse_nproc(nproc) if nproc is not None else cpu.get("cpus")
    if cores is None:
        raise GpuFactsError("no CPU count: neither nproc nor lscpu answered")
    if node_online is not None and node_online.strip():
        numa = parse_cpu_list(node_online)
    else:
        numa = cpu.get("numa_nodes") or 1
    facts: dict[str, Any] = {
        "memory_total_mib": parse_meminfo(meminfo),
        "cpu_cores": cores,
        "numa_nodes": numa,
        "architecture": architecture or cpu.get("architecture"),
    }
    if cpu.get("model_name"):
        facts["cpu_model"] = cpu["model_name"]
    return facts


# --------------------------------------------------------------------------------------------
# CONTRACT 1


def empty_facts(host: dict[str, Any]) -> dict[str, Any]:
    """The CPU lane: no NVIDIA GPU (no nvidia-smi on the host)."""
    return {
        "gpus": [],
        "gpu_count": 0,
        "gpu_name": None,
        "driver_version": None,
        "cuda_version": None,
        "interconnect": None,
        "nvlink_domains": [],
        "nvswitch": False,
        "mig_enabled": False,
        "mig_devices": [],
        "host": dict(host),
    }


def build_facts(
    query_gpu: str,
    host: dict[str, Any],
    nvidia_smi: str | None = None,
    topo: str | None = None,
    mig_list: str | None = None,
    pcie: str | None = None,
    kernel_log: str | None = None,
) -> dict[str, Any]:
    """Build ``ansible_facts['gpu']`` (CONTRACT 1 in docs/architecture.md).

    :param query_gpu: output of ``nvidia-smi`` with :data:`QUERY_GPU_ARGS`.
    :param host: :func:`build_host_facts`'s result.
    :param nvidia_smi: output of plain ``nvidia-smi`` (or ``-q``) for the CUDA version.
    :param topo: output of ``nvidia-smi topo -m``; needed when there are 2 GPUs or more.
    :param mig_list: output of ``nvidia-smi -L``; read when a GPU has MIG enabled.
    :param pcie: output of ``nvidia-smi -q -d PCIE`` (:func:`parse_pcie_links`); ``None`` when it was not run
        or failed: the link keys are then ``None``.
    :param kernel_log: the kernel's ring buffer (``dmesg``); ``None`` when it could not be read: ``xid_errors``
        and ``xid_codes`` are then ``None`` (unknown), not 0.
    :raises GpuFactsError: on malformed output, or topology that does not match the GPU list.

    Keys beyond the contract: ``mig_devices`` (top level) and, per GPU, ``driver_version``,
    ``sm_clock_max_mhz``, ``memory_clock_max_mhz``, the PCIe link (``pcie_link_gen_max``,
    ``pcie_link_gen_current``, ``pcie_link_width_max``, ``pcie_link_width_current``, ``pcie_replays``) and
    ``xid_errors`` / ``xid_codes`` (the kernel's Xid lines for the GPU since boot). ``gpu_name`` is ``None`` on a host whose
    GPUs differ (read each entry of ``gpus`` then).
    """
    gpus = parse_query_gpu(query_gpu)
    links = parse_pcie_links(pcie) if pcie else {}
    xids = parse_xid_log(kernel_log, [gpu["pci_bus_id"] for gpu in gpus]) if kernel_log is not None else None
    for gpu in gpus:
        gpu.update(links.get(gpu["pci_bus_id"]) or dict.fromkeys(
            ("pcie_link_gen_max", "pcie_link_gen_current", "pcie_link_width_max", "pcie_link_width_current",
             "pcie_replays")))
        codes = None if xids is None else xids[gpu["pci_bus_id"]]
        gpu["xid_errors"] = None if codes is None else len(codes)
        gpu["xid_codes"] = None if codes is None else sorted(set(codes))
    drivers = sorted({gpu["driver_version"] for gpu in gpus if gpu["driver_version"]})
    if len(drivers) > 1:
        raise GpuFactsError(f"nvidia-smi reports several driver versions {drivers} on one host")
    driver = drivers[0] if drivers else None
    if driver is None and nvidia_smi:
        driver = parse_driver_version(nvidia_smi)
    names = {gpu["name"] for gpu in gpus}
    facts = empty_facts(host)
    facts.update(
        {
            "gpus": gpus,
            "gpu_count": len(gpus),
            "gpu_name": names.pop() if len(names) == 1 else None,
            "driver_version": driver,
            "cuda_version": parse_cuda_version(nvidia_smi) if nvidia_smi else None,
            "mig_enabled": any(gpu["mig_mode"] == "Enabled" for gpu in gpus),
        }
    )
    if len(gpus) >= 2:
        if topo is None:
            raise GpuFactsError(
                f"{len(gpus)} GPUs but no `nvidia-smi topo -m` output to tell how they are linked"
            )
        matrix = parse_topology(topo)
        indexes = sorted(gpu["index"] for gpu in gpus)
        if sorted(matrix) != indexes:
            raise GpuFactsError(
                f"nvidia-smi topo -m shows GPUs {sorted(matrix)} but --query-gpu lists {indexes}"
            )
        interconnect, domains, nvswitch = analyse_interconnect(
            matrix, {gpu["index"]: gpu["compute_capability"] for gpu in gpus}
        )
        facts.update({"interconnect": interconnect, "nvlink_domains": domains, "nvswitch": nvswitch})
    if facts["mig_enabled"] and mig_list is not None:
        facts["mig_devices"] = parse_mig_devices(mig_list)
    return facts


_GPU_KEYS: dict[str, tuple[type, ...]] = {
    "index": (int,),
    "uuid": (str,),
    "name": (str,),
    "pci_bus_id": (str,),
    "memory_total_mib": (int,),
    "memory_used_mib": (int, type(None)),
    "memory_free_mib": (int, type(None)),
    "compute_capability": (str,),
    "persistence_mode": (bool, type(None)),
    "power_limit_w": (int, float, type(None)),
    "mig_mode": (str, type(None)),
    "ecc_mode": (str, type(None)),
}
# Per-GPU keys added after facts were first recorded: filled with None (unknown) in an older recording.
_GPU_OPTIONAL_KEYS: dict[str, tuple[type, ...]] = {
    "pcie_link_gen_max": (int, type(None)),
    "pcie_link_gen_current": (int, type(None)),
    "pcie_link_width_max": (int, type(None)),
    "pcie_link_width_current": (int, type(None)),
    "pcie_replays": (int, type(None)),
    "xid_errors": (int, type(None)),
    "xid_codes": (list, type(None)),
}
_TOP_KEYS: dict[str, tuple[type, ...]] = {
    "gpus": (list,),
    "gpu_count": (int,),
    "gpu_name": (str, type(None)),
    "driver_version": (str, type(None)),
    "cuda_version": (str, type(None)),
    "interconnect": (str, type(None)),
    "nvlink_domains": (list,),
    "nvswitch": (bool,),
    "mig_enabled": (bool,),
    "host": (dict,),
}
_HOST_KEYS: dict[str, tuple[type, ...]] = {
    "memory_total_mib": (int,),
    "cpu_cores": (int,),
    "numa_nodes": (int,),
    "architecture": (str, type(None)),
}


def _check_keys(obj: dict[str, Any], spec: dict[str, tuple[type, ...]], where: str) -> None:
    for key, types in spec.items():
        if key not in obj:
            raise GpuFactsError(f"{where}: missing key {key!r}")
        value = obj[key]
        if isinstance(value, bool) and bool not in types:
            raise GpuFactsError(
                "{}: {!r} is {!r}, expected {}".format(where, key, value, "/".join(t.__name__ for t in types))
            )
        if not isinstance(value, types):
            raise GpuFactsError(
                "{}: {!r} is {!r} ({}), expected {}".format(
                    where, key, value, type(value).__name__, "/".join(t.__name__ for t in types)
                )
            )


def validate_facts(facts: Any, where: str = "GPU facts") -> dict[str, Any]:
    """Check a recorded facts document against CONTRACT 1 and return it.

    Accepts the facts themselves or ``{"gpu": {...}}`` / ``{"ansible_facts": {"gpu": {...}}}``
    (what the module returns), so a saved module result can be used as is. Missing optional keys
    (``mig_devices``; per GPU the PCIe link and Xid keys, ``None``: unknown) are filled in.

    :raises GpuFactsError: naming the first key that is missing or has the wrong type, or a
        count / domain that does not match the GPU list.
    """
    if isinstance(facts, dict) and "ansible_facts" in facts and isinstance(facts["ansible_facts"], dict):
        facts = facts["ansible_facts"]
    if isinstance(facts, dict) and "gpus" not in facts and isinstance(facts.get("gpu"), dict):
        facts = facts["gpu"]
    if not isinstance(facts, dict):
        raise GpuFactsError(f"{where}: expected a JSON object, got {type(facts).__name__}")
    _check_keys(facts, _TOP_KEYS, where)
    _check_keys(facts["host"], _HOST_KEYS, where + " host")
    for position, gpu in enumerate(facts["gpus"]):
        if not isinstance(gpu, dict):
            raise GpuFactsError(f"{where}: gpus[{position}] is not an object")
        _check_keys(gpu, _GPU_KEYS, f"{where} gpus[{position}]")
        for key in _GPU_OPTIONAL_KEYS:
            gpu.setdefault(key, None)
        _check_keys(gpu, _GPU_OPTIONAL_KEYS, f"{where} gpus[{position}]")
        if not _CC_RE.match(gpu["compute_capability"]):
            raise GpuFactsError(
                f"{where} gpus[{position}]: compute_capability {gpu['compute_capability']!r} is not MAJOR.MINOR"
            )
    if facts["gpu_count"] != len(facts["gpus"]):
        raise GpuFactsError(
            f"{where}: gpu_count is {facts['gpu_count']} but {len(facts['gpus'])} GPUs are listed"
        )
    if facts["interconnect"] not in (None, "nvswitch", "nvlink", "pcie"):
        raise GpuFactsError(
            "{}: interconnect {!r} is not nvswitch, nvlink, pcie or null".format(where, facts["interconnect"])
        )
    indexes = {gpu["index"] for gpu in facts["gpus"]}
    for domain in facts["nvlink_domains"]:
        if not isinstance(domain, list) or not set(domain) <= indexes or len(domain) < 2:
            raise GpuFactsError(
                f"{where}: nvlink domain {domain!r} does not name 2 or more listed GPU indexes"
            )
    result = dict(facts)
    result.setdefault("mig_devices", [])
    return result
