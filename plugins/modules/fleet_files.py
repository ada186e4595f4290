#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Documentation of the fleet_files action (plugins/action/fleet_files.py): many text files in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_files
short_description: Write many text files under one directory on the controller in one task
version_added: "0.1.0"
description:
  - Writes every file of O(files) under O(dest), creating folders as needed; a file whose content is already the
    same is left alone, so a re-run reports no change.
  - One task for the whole fleet instead of one C(copy) per host (the preflight report writes a chart per host).
  - The action plugin of the same name writes on the controller, in the controller process (no arguments of
    tens of MB handed to a module process); use it with C(delegate_to=localhost).
  - Supports check mode and C(--diff) (the names of the files that would change).
options:
  dest:
    description: Directory the paths in O(files) are relative to.
    type: path
    required: true
  files:
    description: Relative path -> text content. Paths must stay inside O(dest).
    type: dict
    required: true
  mode:
    description: Permissions of the files written.
    type: str
    default: "0644"
attributes:
  check_mode:
    description: Reports what would change without writing.
    support: full
  diff_mode:
    description: Lists the files that would change.
    support: full
  action:
    description: The action plugin writes on the controller.
    support: full
  platform:
    description: The controller (POSIX).
    support: full
    platforms: posix
author:
  - vllm-fleet contributors (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Write the report
  vllm_fleet.fleet.fleet_files:
    dest: artifacts/fleet-plan
    files:
      README.md: "# plan"
      memory/h1.svg: "<svg/>"
  delegate_to: localhost
"""

RETURN = r"""
changed_files:
  description: Relative paths written (or that would be written in check mode).
  returned: always
  type: list
  elements: str
  sample: [README.md]
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    """The work is done by the action plugin of the same name (plugins/action/fleet_files.py), on the controller;
    Ansible never runs this module while that action exists. Reached directly, it says so."""
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    module.fail_json(msg="fleet_files runs as an action on the controller (plugins/action/fleet_files.py)")


if __name__ == "__main__":
    main()
