#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Module gpu_facts: discover a host's NVIDIA GPUs, their links, CPU and memory (documented below)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Discover a host's NVIDIA GPUs, their links, the host's CPU, memory and network
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits), plain C(nvidia-smi) (for the CUDA
    version), C(nvidia-smi topo -m) (with 2 GPUs or more), C(nvidia-smi -L) (when MIG is enabled) and
    C(nvidia-smi -q) (each GPU's PCIe link generation, width and replays, from its PCI section), reads the kernel's Xid lines
    for each GPU from C(dmesg) (unknown, not 0, where the kernel log cannot be read), reads
    C(/proc/meminfo), C(/sys/devices/system/node/online), C(nproc) and C(lscpu), and returns
    C(ansible_facts.gpu) in the shape of CONTRACT 1 (docs/architecture.md), the planner's input.
  - Also returns C(ansible_facts.network) - the interfaces and their addresses (C(ip -j addr show), or
    C(ip -o addr show) and C(ip -o link show) where C(ip) has no C(-j)), the RDMA ports
    (C(/sys/class/infiniband)) and the C(/dev/infiniband) device nodes - from which a multi-node launch
    takes VLLM_HOST_IP, NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME and the RDMA devices of the container.
    A host without C(ip) or without RDMA gets empty lists; the network never fails the task.
  - A host without C(nvidia-smi) gets C(gpus=[]) and the host facts (the CPU lane), unless O(require_gpu=true).
  - An C(nvidia-smi) that fails (no devices, driver/library version mismatch, driver not loaded, output that
    is not what was asked for) fails the task with a message that says what it means and what to do.
  - Read-only. Never reports a change.
author:
  - vllm-fleet contributors (@vllm-fleet)
options:
  require_gpu:
    description:
      - Fail when the host has no NVIDIA GPU (no C(nvidia-smi), or a facts file with no GPU) instead of
        returning the CPU lane.
    type: bool
    default: false
  facts_file:
    description:
      - Path (on the host the module runs on) of recorded facts, JSON in the shape of CONTRACT 1
        (a saved result of this module, with C(ansible_facts.gpu) or C(gpu) at the top, is accepted too).
      - When set, nothing is probed; the file is checked and returned. Use it with C(delegate_to=localhost)
        to plan a fleet from recorded facts without touching its hosts.
    type: path
  return_raw:
    description:
      - Also return the raw command outputs under RV(raw) (to record fixtures and debug parsers).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same probes in check mode.
  diff_mode:
    support: none
    description: Read-only; there is nothing to show a difference of.
  facts:
    support: full
    description: Returns C(ansible_facts.gpu) and C(ansible_facts.network).
notes:
  - Commands run with C(LC_ALL=C). C(nvidia-smi) is looked up on E(PATH) and the usual sbin folders.
  - Two GPUs joined by NVLink through an NVSwitch look like a direct NVLink pair in C(nvidia-smi topo -m) and are
    reported as C(interconnect=nvlink), C(nvswitch=false) (no fabric manager is needed on such a guest).
requirements:
  - Linux (C(/proc/meminfo)); the NVIDIA driver's C(nvidia-smi) for GPU facts.
"""

EXAMPLES = r"""
- name: Discover GPUs (CPU lane when there are none)
  vllm_fleet.fleet.gpu_facts:

- name: Discover GPUs; a GPU host without a working driver must stop here
  vllm_fleet.fleet.gpu_facts:
    require_gpu: true

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu']['gpu_count'] }} x {{ ansible_facts['gpu']['gpu_name'] }} ({{ ansible_facts['gpu']['interconnect'] }})"

- name: Use recorded facts instead of probing (plan a fleet without reaching it)
  vllm_fleet.fleet.gpu_facts:
    facts_file: "{{ inventory_dir }}/facts/{{ inventory_hostname }}.json"
  delegate_to: localhost
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: success
  type: dict
  contains:
    gpu:
      description: CONTRACT 1 (docs/architecture.md).
      returned: success
      type: dict
      contains:
        gpus:
          description:
            - One entry per GPU - index, uuid, name, pci_bus_id, memory_total_mib, memory_used_mib,
              memory_free_mib, compute_capability, persistence_mode, power_limit_w, mig_mode, ecc_mode,
              driver_version, sm_clock_max_mhz, memory_clock_max_mhz, pcie_link_gen_max, pcie_link_gen_current
              (lower while the GPU idles), pcie_link_width_max, pcie_link_width_current (below the maximum - a
              slot, riser or cable fault), pcie_replays, xid_errors (the kernel's Xid lines for the GPU since
              boot; null where the kernel log cannot be read) and xid_codes. Values nvidia-smi reports as N/A
              are null.
          type: list
          elements: dict
          sample:
            - index: 0
              uuid: GPU-60850100-ca60-f302-b118-74ae106ea6a8
              name: NVIDIA H200
              pci_bus_id: "00000000:00:06.0"
              memory_total_mib: 143771
              memory_used_mib: 0
              memory_free_mib: 143156
              compute_capability: "9.0"
              persistence_mode: true
              power_limit_w: 700.0
              mig_mode: Disabled
              ecc_mode: Enabled
              driver_version: "580.159.04"
              sm_clock_max_mhz: 1980
              memory_clock_max_mhz: 3201
              pcie_link_gen_max: 5
              pcie_link_gen_current: 5
              pcie_link_width_max: 16
              pcie_link_width_current: 16
              pcie_replays: 1
              xid_errors: 0
              xid_codes: []
        gpu_count:
          description: Number of GPUs (0 on the CPU lane).
          type: int
          sample: 2
        gpu_name:
          description: The GPUs' name when they are all the same; null with no GPU or a mix.
          type: str
          sample: NVIDIA H200
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "580.159.04"
        cuda_version:
          description: The CUDA Version nvidia-smi prints (the newest CUDA the driver supports).
          type: str
          sample: "13.0"
        interconnect:
          description: nvswitch, nvlink (all GPUs in one NVLink domain), pcie, or null (fewer than 2 GPUs).
          type: str
          sample: nvlink
        nvlink_domains:
          description: Groups of GPU indexes every pair of which is joined by NVLink.
          type: list
          elements: list
          sample: [[0, 1]]
        nvswitch:
          description: True when the links can only go through NVSwitch (fabric manager required).
          type: bool
          sample: false
        mig_enabled:
          description: True when any GPU has MIG mode enabled.
          type: bool
          sample: false
        mig_devices:
          description: MIG devices from C(nvidia-smi -L) (gpu, device, profile, uuid, compute_slices, memory_gb).
          type: list
          elements: dict
          sample: []
        host:
          description: memory_total_mib, cpu_cores (CPUs this process may use), numa_nodes, architecture, cpu_model.
          type: dict
          sample: {memory_total_mib: 257811, cpu_cores: 32, numa_nodes: 1, architecture: x86_64}
    network:
      description:
        - The host's network as a multi-node launch needs it. Null when O(facts_file) holds no C(network)
          (facts recorded before network discovery; re-run discovery to get them).
      returned: success
      type: dict
      contains:
        interfaces:
          description:
            - One entry per interface, in the order C(ip) lists them - name, ipv4 and ipv6 (ADDRESS/PREFIX),
              up (administratively up) and mtu (null when only C(ip -o addr show) could be read).
          type: list
          elements: dict
          sample:
            - {name: eth0, ipv4: ["10.0.0.5/24"], ipv6: ["fe80::1/64"], up: true, mtu: 1500}
        rdma:
          description:
            - One entry per RDMA port (InfiniBand or RoCE) - device, port, link_layer (InfiniBand or Ethernet),
              state (ACTIVE, DOWN, ...) and netdev (its network device, or null).
          type: list
          elements: dict
          sample:
            - {device: mlx5_0, port: 1, link_layer: InfiniBand, state: ACTIVE, netdev: ib0}
        rdma_dev_nodes:
          description: The entries of C(/dev/infiniband) (what a container needs for RDMA).
          type: list
          elements: str
          sample: ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"]
source:
  description: Where the facts came from - C(nvidia-smi), C(none) (no nvidia-smi, CPU lane) or C(facts_file).
  returned: success
  type: str
  sample: nvidia-smi
raw:
  description:
    - Raw outputs (query_gpu, nvidia_smi, topo, list, meminfo, nproc, lscpu, node_online, ip_addr_json,
      ip_addr, ip_link, infiniband) with O(return_raw=true).
  returned: when return_raw is true
  type: dict
"""

import json
import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.network_facts import (
    IP_ADDR_JSON_ARGS,
    IP_ADDR_TEXT_ARGS,
    IP_LINK_TEXT_ARGS,
    NetworkFactsError,
    build_network,
    parse_ip_json,
    parse_ip_text,
    parse_rdma,
    validate_network,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.nvidia_smi import (
    LIST_ARGS,
    PCIE_ARGS,
    QUERY_GPU_ARGS,
    TOPO_ARGS,
    GpuFactsError,
    build_facts,
    build_host_facts,
    check_nvidia_smi_result,
    empty_facts,
    parse_query_gpu,
    validate_facts,
)

_ENV = {"LC_ALL": "C", "LANG": "C"}
_MEMINFO = "/proc/meminfo"
_NODE_ONLINE = "/sys/devices/system/node/online"
_SYS_INFINIBAND = "/sys/class/infiniband"
_DEV_INFINIBAND = "/dev/infiniband"


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read_infiniband(root):
    """The files parse_rdma() reads, relative to /sys/class/infiniband (content, None when unreadable)."""
    found = {}
    for device in _listdir(root):
        for port in _listdir(os.path.join(root, device, "ports")):
            for name in ("link_layer", "state"):
                found[f"{device}/ports/{port}/{name}"] = _read(os.path.join(root, device, "ports", port, name))
        for netdev in _listdir(os.path.join(root, device, "device", "net")):
            found[f"{device}/device/net/{netdev}/dev_port"] = _read(
                os.path.join(root, device, "device", "net", netdev, "dev_port")
            )
    return found


class GpuFacts:
    """Collect the outputs, hand them to the pure parsers, report."""

    def __init__(self, module):
        self.module = module
        self.raw = {}

    def run(self, argv, key):
        """Run one nvidia-smi command; fail the task with a diagnosis unless it worked."""
        rc, out, err = self.module.run_command(list(argv), environ_update=_ENV)
        self.raw[key] = out
        label = " ".join(["nvidia-smi", *argv[1:]]) if key != "query_gpu" else "nvidia-smi --query-gpu"
        try:
            check_nvidia_smi_result(rc, out, err, label)
        except GpuFactsError as exc:
            self.fail(str(exc), rc=rc, stdout=out, stderr=err, cmd=" ".join(argv))
        return out

    def optional(self, argv, key):
        """Run a command whose output only adds detail (the PCIe link, the kernel log): None when it fails."""
        rc, out, _err = self.module.run_command(list(argv), environ_update=_ENV)
        self.raw[key] = out
        return out if rc == 0 else None

    def kernel_log(self):
        """The kernel ring buffer (dmesg; root or CAP_SYSLOG where kernel.dmesg_restrict is 1), or None."""
        dmesg = self.module.get_bin_path("dmesg")
        return self.optional([dmesg], "dmesg") if dmesg else None

    def fail(self, msg, **extra):
        result = dict(changed=False, msg=msg, **extra)
        if self.module.params["return_raw"]:
            result["raw"] = self.raw
        self.module.fail_json(**result)

    def host(self):
        meminfo = _read(_MEMINFO)
        if meminfo is None:
            self.fail(f"cannot read {_MEMINFO}: gpu_facts needs a Linux host")
        node_online = _read(_NODE_ONLINE)
        nproc = lscpu = None
        nproc_bin = self.module.get_bin_path("nproc")
        if nproc_bin:
            rc, out, _err = self.module.run_command([nproc_bin], environ_update=_ENV)
            nproc = out if rc == 0 else None
        if nproc is None:
            cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
            nproc = str(len(cpus) if cpus else (os.cpu_count() or 1))
        lscpu_bin = self.module.get_bin_path("lscpu")
        if lscpu_bin:
            rc, out, _err = self.module.run_command([lscpu_bin], environ_update=_ENV)
            lscpu = out if rc == 0 else None
        self.raw.update({"meminfo": meminfo, "nproc": nproc, "lscpu": lscpu, "node_online": node_online})
        return build_host_facts(meminfo, nproc, lscpu, node_online, platform.machine() or None)

    def network(self):
        """Interfaces (ip), RDMA ports (sysfs) and /dev/infiniband; empty lists, never a failure."""
        interfaces = []
        ip = self.module.get_bin_path("ip")
        if ip:
            rc, out, _err = self.module.run_command([ip, *IP_ADDR_JSON_ARGS], environ_update=_ENV)
            self.raw["ip_addr_json"] = out
            try:
                if rc != 0:
                    raise NetworkFactsError(f"ip -j addr show failed (rc {rc})")
                interfaces = parse_ip_json(out)
            except NetworkFactsError:
                rc, addr, _err = self.module.run_command([ip, *IP_ADDR_TEXT_ARGS], environ_update=_ENV)
                self.raw["ip_addr"] = addr
                lrc, link, _err = self.module.run_command([ip, *IP_LINK_TEXT_ARGS], environ_update=_ENV)
                self.raw["ip_link"] = link
                try:
                    interfaces = parse_ip_text(addr, link if lrc == 0 else None) if rc == 0 else []
                except NetworkFactsError:
                    interfaces = []
        sysfs = _read_infiniband(_SYS_INFINIBAND)
        self.raw["infiniband"] = sysfs
        return build_network(interfaces, parse_rdma(sysfs), _listdir(_DEV_INFINIBAND))

    def from_file(self, path):
        text = _read(path)
        if text is None:
            self.fail(
                f"facts_file {path} cannot be read (it is read on the host the module runs on; "
                "use delegate_to: localhost for files on the controller)"
            )
        try:
            data = json.loads(text)
        except ValueError as exc:
            self.fail(f"facts_file {path} is not JSON: {exc}")
        try:
            facts = validate_facts(data, f"facts_file {path} (CONTRACT 1 GPU facts)")
        except GpuFactsError as exc:
            self.fail(str(exc))
        network = facts.get("network")
        if network is None and isinstance(data, dict):  # a saved module result: ansible_facts.network
            outer = data.get("ansible_facts") if isinstance(data.get("ansible_facts"), dict) else data
            network = outer.get("network")
        if network is not None:
            try:
                network = validate_network(network, f"facts_file {path} network")
            except NetworkFactsError as exc:
                self.fail(f"{exc}: re-run discovery (gpu_facts without facts_file) or remove 'network'")
        return facts, network

    def probe(self):
        host = self.host()
        smi = self.module.get_bin_path("nvidia-smi")
        if not smi:
            return empty_facts(host), "none"
        query = self.run([smi, *QUERY_GPU_ARGS], "query_gpu")
        plain = self.run([smi], "nvidia_smi")
        try:
            gpus = parse_query_gpu(query)
            topo = self.run([smi, *TOPO_ARGS], "topo") if len(gpus) >= 2 else None
            mig = any(gpu["mig_mode"] == "Enabled" for gpu in gpus)
            mig_list = self.run([smi, *LIST_ARGS], "list") if mig else None
            pcie = self.optional([smi, *PCIE_ARGS], "pcie")
            facts = build_facts(query, host, nvidia_smi=plain, topo=topo, mig_list=mig_list, pcie=pcie,
                                kernel_log=self.kernel_log())
        except GpuFactsError as exc:
            self.fail(str(exc), cmd=smi)
        return facts, "nvidia-smi"

    def main(self):
        params = self.module.params
        if params["facts_file"]:
            (facts, network), source = self.from_file(params["facts_file"]), "facts_file"
        else:
            facts, source = self.probe()
            network = self.network()
        if params["require_gpu"] and facts["gpu_count"] == 0:
            if source == "none":
                self.fail(
                    "require_gpu is true but nvidia-smi is not installed on this host (no NVIDIA driver): "
                    "install the driver (role vllm_fleet.fleet.nvidia_driver) or put the host in the CPU lane"
                )
            self.fail(f"require_gpu is true but {params['facts_file']} lists no GPU")
        result = dict(changed=False, source=source, ansible_facts={"gpu": facts, "network": network})
        if params["return_raw"]:
            result["raw"] = self.raw
        self.module.exit_json(**result)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            require_gpu=dict(type="bool", default=False),
            facts_file=dict(type="path"),
            return_raw=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )


def main():
    GpuFacts(build_module()).main()


if __name__ == "__main__":
    main()
