#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Documentation of the vllm_dashboards action (plugins/action/vllm_dashboards.py): vLLM's own Grafana dashboards."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_dashboards
short_description: vLLM's own Grafana dashboards for the given vLLM versions, pinned per version
version_added: "0.1.0"
description:
  - For each vLLM version, reads vLLM's Grafana dashboards (C(examples/observability/prometheus_grafana/grafana.json),
    C(examples/observability/dashboards/grafana/performance_statistics.json) and C(query_statistics.json)) out of
    the release's source archive on the package index, checked against the size and sha256 the collection pins per
    version, and returns them adapted to the fleet's Prometheus datasource, each with a uid and title of its own.
  - The index is the one the controller's pip is configured with (C(pip config list), C(PIP_INDEX_URL) included),
    or O(index_url). Archives are cached in O(cache_dir); a cached archive with the pinned digest is not fetched again.
  - Runs on the controller, in the controller process (action plugin); changes nothing anywhere (C(changed) is
    always false). Write the returned dashboards with M(ansible.builtin.copy). Runs in check mode too.
options:
  versions:
    description: vLLM versions; each must have pinned dashboards (0.32.0, 0.33.0).
    type: list
    elements: str
    required: true
  datasource_uid:
    description: UID of the Grafana datasource the dashboards' datasource variable defaults to.
    type: str
    default: prometheus
  datasource_name:
    description: Name of that datasource.
    type: str
    default: Prometheus
  index_url:
    description: A simple package index to read the archives from instead of pip's configuration.
    type: str
    default: ""
  cache_dir:
    description: Controller directory for the source archives.
    type: path
    default: ~/.cache/vllm-fleet/vllm-sdist
author:
  - vllm-fleet contributors (@vllm-fleet)
"""

EXAMPLES = r"""
- name: vLLM's own dashboards for the versions the fleet runs
  vllm_fleet.fleet.vllm_dashboards:
    versions: ["0.32.0"]
    datasource_uid: prometheus
  run_once: true
  register: upstream

- name: Write them next to the fleet dashboard
  ansible.builtin.copy:
    content: "{{ item.model | to_nice_json(indent=2) }}\n"
    dest: "/var/lib/vllm-fleet/grafana/dashboards/{{ item.file }}"
    mode: "0644"
  loop: "{{ upstream.dashboards }}"
  loop_control:
    label: "{{ item.file }}"
"""

RETURN = r"""
dashboards:
  description: One entry per dashboard and version.
  returned: always
  type: list
  elements: dict
  contains:
    file:
      description: File name, C(vllm-<version>-<overview|performance|queries>.json).
      type: str
    uid:
      description: The dashboard's uid.
      type: str
    title:
      description: The dashboard's title.
      type: str
    version:
      description: The vLLM version.
      type: str
    model:
      description: The dashboard JSON model.
      type: dict
sources:
  description: Per version, the cached archive and where it came from (C(cache) or its address).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    """The work is done by the action plugin of the same name (plugins/action/vllm_dashboards.py), on the
    controller; Ansible never runs this module while that action exists. Reached directly, it says so."""
    module = AnsibleModule(
        argument_spec={
            "versions": {"type": "list", "elements": "str", "required": True},
            "datasource_uid": {"type": "str", "default": "prometheus"},
            "datasource_name": {"type": "str", "default": "Prometheus"},
            "index_url": {"type": "str", "default": ""},
            "cache_dir": {"type": "path", "default": "~/.cache/vllm-fleet/vllm-sdist"},
        },
        supports_check_mode=True,
    )
    module.fail_json(msg="vllm_dashboards runs as an action on the controller (plugins/action/vllm_dashboards.py)")


if __name__ == "__main__":
    main()
