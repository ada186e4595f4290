# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Action for vllm_fleet.fleet.fleet_files: writes the files on the controller, in the controller process.

The report of a 1,000-host fleet is tens of MB of text; handing it to a module process as arguments costs
more than rendering it. Preflight writes its report on the controller anyway (delegate_to: localhost), so
the action writes directly, with the module's semantics (only differing files, check mode, diff).
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.atomic_write import write_atomic


def _inside(base: str, path: str) -> str | None:
    full = os.path.realpath(os.path.join(base, path))
    return full if full == base or full.startswith(base + os.sep) else None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("dest", "files", "mode"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        dest, files = args.get("dest"), args.get("files")
        if not isinstance(dest, str) or not dest:
            raise AnsibleActionFail("fleet_files: dest must be a directory path")
        if not isinstance(files, dict):
            raise AnsibleActionFail("fleet_files: files must be a dict of relative path -> text")
        mode = int(str(args.get("mode", "0644")), 8)
        base = os.path.realpath(os.path.expanduser(dest))
        changed = []
        for rel in sorted(files):
            content = files[rel]
            if not isinstance(content, str):
                raise AnsibleActionFail(f"fleet_files: the content of {rel} must be text")
            full = _inside(base, str(rel))
            if full is None:
                raise AnsibleActionFail(f"fleet_files: {rel} is outside {base}")
            data = content.encode("utf-8")
            try:
                with open(full, "rb") as handle:
                    if handle.read() == data:
                        continue
            except OSError:
                pass
            changed.append(str(rel))
            if self._task.check_mode:
                continue
            write_atomic(full, data, mode)
        result.update(changed=bool(changed), changed_files=changed,
                      diff={"before": "", "after": "".join(f"{rel}\n" for rel in changed)})
        return result
