#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""A small text file on the host, its content and attributes checked and set in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: config_file
short_description: Write a small text file (content, owner, group, mode) in one round trip
version_added: "0.1.0"
description:
  - Makes O(dest) hold exactly O(content) with the given owner, group and mode; reports a change only when one of
    them differs, so a re-run reports no change.
  - The provisioning roles write their configuration files with it, the content rendered on the controller with
    C(lookup('ansible.builtin.template', ...)). C(ansible.builtin.template) and C(ansible.builtin.copy) make two
    module round trips per file on an unchanged host (C(stat), then C(file) for the attributes); this module makes
    one. Measured on 20 container hosts, the six files of the provisioning stage cost 248 s of a 482 s no-op run
    (README, "Ansible at fleet scale").
  - The file is replaced atomically (a temporary file in the same folder, then a rename). The parent folder must
    exist.
  - For configuration files of a few kB; large or binary content belongs to C(ansible.builtin.copy).
options:
  dest:
    description: Absolute path of the file.
    type: path
    required: true
  content:
    description: The whole text of the file (UTF-8).
    type: str
    required: true
extends_documentation_fragment:
  - ansible.builtin.files
attributes:
  check_mode:
    description: Reports what would change without writing.
    support: full
  diff_mode:
    description: Shows the content before and after, and attribute changes.
    support: full
  platform:
    description: POSIX hosts.
    support: full
    platforms: posix
author:
  - vllm-fleet contributors (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Sysctl | Persist kernel parameters
  vllm_fleet.fleet.config_file:
    dest: /etc/sysctl.d/60-vllm-fleet.conf
    content: "{{ lookup('ansible.builtin.template', 'sysctl.conf.j2') }}"
    owner: root
    group: root
    mode: "0644"
  notify: host_tuning apply sysctl
"""

RETURN = r"""
dest:
  description: The file's path.
  returned: always
  type: str
  sample: /etc/sysctl.d/60-vllm-fleet.conf
content_changed:
  description: Whether the content was (or, in check mode, would be) replaced.
  returned: always
  type: bool
  sample: false
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "content": {"type": "str", "required": True},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    data = module.params["content"].encode("utf-8")
    folder = os.path.dirname(dest) or "."
    if not os.path.isdir(folder):
        module.fail_json(msg=f"{folder} does not exist: create it before writing {dest}", dest=dest)
    if os.path.isdir(dest):
        module.fail_json(msg=f"{dest} is a folder, not a file", dest=dest)

    current = _read(dest)
    content_changed = current != data
    diff = {"before_header": dest, "after_header": dest,
            "before": "" if current is None else current.decode("utf-8", "replace"),
            "after": module.params["content"]} if content_changed else {}
    if content_changed and not module.check_mode:
        handle, tmp_path = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(dest)}.")
        try:
            with os.fdopen(handle, "wb") as tmp_file:
                tmp_file.write(data)
            module.atomic_move(tmp_path, dest)
        finally:
            if os.path.exists(tmp_path):
                os.unlink(tmp_path)

    changed = content_changed
    if not (module.check_mode and current is None):
        # owner, group, mode (and SELinux context): changed/diff per ansible.builtin.file's own rules
        attr_diff = {"before": {"path": dest}, "after": {"path": dest}}
        file_args = module.load_file_common_arguments(module.params, path=dest)
        changed = module.set_fs_attributes_if_different(file_args, changed, attr_diff)
        if not content_changed and attr_diff["before"] != attr_diff["after"]:
            diff = attr_diff
    module.exit_json(changed=changed, dest=dest, content_changed=content_changed, diff=diff)


if __name__ == "__main__":
    main()
