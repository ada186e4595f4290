#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Documentation of the replica_wait action (plugins/action/replica_wait.py): the health gate's wait, readable."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: replica_wait
short_description: Wait for a vLLM container to turn healthy and answer, printing readable progress
version_added: "0.1.0"
description:
  - Probes the container on the host (C(community.docker.docker_container_info)) every O(interval_s) until it is
    healthy (or has no health check) and, with O(url), until that URL answers 200 (C(ansible.builtin.uri)).
  - Prints one line every O(progress_s) with the elapsed time, the container's health and the last line of its
    log, instead of one C(FAILED - RETRYING) line per probe.
  - Fails at once when the container stops or restarts, and after O(timeout_s), with the
    container's state and last log line in the message.
  - The action plugin of the same name does the work; it runs the probe modules on the task's host.
options:
  container:
    description: Name of the container.
    type: str
    required: true
  url:
    description: URL that must answer 200 once the container is healthy (vLLM's C(/health)); omit for a
      container that serves no API (a headless multi-node worker).
    type: str
  timeout_s:
    description: Seconds to wait in all.
    type: float
    default: 600
  interval_s:
    description: Seconds between two probes.
    type: float
    default: 5
  progress_s:
    description: Seconds between two progress lines.
    type: float
    default: 15
  group_signal:
    description:
      - For the nodes of a multi-node group, a key naming the group and the attempt (the same on every node).
      - A node that fails records its reason on the controller; the other nodes stop waiting at their next probe
        and fail with that reason, instead of waiting out O(timeout_s) (rank 0 hangs when a worker dies).
    type: str
attributes:
  check_mode:
    description: Skipped in check mode (no replica was started).
    support: none
  diff_mode:
    description: Nothing to show.
    support: none
  action:
    description: The action plugin probes through modules on the host.
    support: full
  platform:
    description: A host with the Docker engine.
    support: full
    platforms: posix
author:
  - vllm-fleet contributors (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Wait for the replica
  vllm_fleet.fleet.replica_wait:
    container: vllm-0
    url: http://127.0.0.1:8000/health
    timeout_s: 300
"""

RETURN = r"""
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
  sample: 42.5
probes:
  description: Number of probes made.
  returned: success
  type: int
  sample: 9
health:
  description: The container's health when it was ready (C(healthy), or C(none) without a health check).
  returned: success
  type: str
  sample: healthy
state:
  description: The container's state when the wait failed.
  returned: failure
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    """The work is done by the action plugin of the same name (plugins/action/replica_wait.py); Ansible never
    runs this module while that action exists. Reached directly, it says so."""
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "url": {"type": "str"},
            "timeout_s": {"type": "float", "default": 600},
            "interval_s": {"type": "float", "default": 5},
            "progress_s": {"type": "float", "default": 15},
            "group_signal": {"type": "str"},
        },
        supports_check_mode=False,
    )
    module.fail_json(msg="replica_wait runs as an action (plugins/action/replica_wait.py)")


if __name__ == "__main__":
    main()
