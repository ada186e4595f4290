# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Action for vllm_fleet.fleet.replica_wait: wait for a vLLM container to turn healthy, printing its progress.

An ``until``/``retries`` loop prints ``FAILED - RETRYING`` once per probe (fifty lines for one slow start) and
nothing about what vLLM is doing. This action probes on the host with the same modules the loop used
(``community.docker.docker_container_info``, then ``ansible.builtin.uri``) and prints one line every
``progress_s``: the elapsed time, the container's health and the last line of its log.

The nodes of a multi-node group wait side by side (one task, one worker process each). With ``group_signal`` (a
key naming the group and the attempt), a node that fails writes the reason to a file on the controller, shared by
the workers of this ``ansible-playbook`` run (named after its process id), and every other node of the group
stops waiting at its next probe with that reason: a dead worker makes rank 0 hang in its collective, which would
otherwise hold the group until the timeout.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def _signal_path(key: str) -> str:
    """The group's failure file: one folder per ansible-playbook run (the workers' parent process), one file per
    group attempt."""
    folder = os.path.join(tempfile.gettempdir(), f"vllm-fleet-gates-{os.getppid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return os.path.join(folder, hashlib.sha256(key.encode()).hexdigest()[:24] + ".failed")


def _peer_failure(path: str | None, host: str) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    return None if text.startswith(f"{host}: ") else text


def _number(args: dict[str, Any], name: str, default: float) -> float:
    value = args.get(name, default)
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise AnsibleActionFail(f"replica_wait: {name} must be a number, got {value!r}") from exc
    if number <= 0:
        raise AnsibleActionFail(f"replica_wait: {name} must be positive, got {value!r}")
    return number


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("container", "url", "timeout_s", "interval_s", "progress_s", "group_signal"))
    _signal: str | None = None
    _host: str = "?"

    def _module(self, name: str, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        return result

    def _state(self, container: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        info = self._module("community.docker.docker_container_info", {"name": container}, task_vars)
        if info.get("failed"):
            raise AnsibleActionFail(f"replica_wait: cannot inspect {container}: {info.get('msg', info)}")
        state = (info.get("container") or {}).get("State") or {}
        return {"exists": bool(info.get("exists")), "running": bool(state.get("Running")),
                "status": state.get("Status", "absent"), "exit_code": state.get("ExitCode", "-"),
                "restarts": int((info.get("container") or {}).get("RestartCount") or 0),
                "health": (state.get("Health") or {}).get("Status", "none")}

    def _last_log_line(self, container: str, task_vars: dict[str, Any]) -> str:
        logs = self._module("ansible.builtin.command", {"argv": ["docker", "logs", "--tail", "3", container]},
                            task_vars)
        lines = [line.strip() for line in f"{logs.get('stdout', '')}\n{logs.get('stderr', '')}".splitlines()
                 if line.strip()]
        return lines[-1][:200] if lines else "(no log yet)"

    def _answers(self, url: str, task_vars: dict[str, Any]) -> bool:
        probe = self._module("ansible.builtin.uri", {"url": url, "status_code": [200], "timeout": 5}, task_vars)
        return not probe.get("failed") and probe.get("status") == 200

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        container = args.get("container")
        if not isinstance(container, str) or not container:
            raise AnsibleActionFail("replica_wait: container must be the container's name")
        url = args.get("url") or None
        timeout_s = _number(args, "timeout_s", 600)
        interval_s = _number(args, "interval_s", 5)
        progress_s = _number(args, "progress_s", 15)
        if self._task.check_mode:
            result.update(skipped=True, msg="check mode: no replica was started, nothing to wait for")
            return result
        host = task_vars.get("inventory_hostname", "?")
        signal = args.get("group_signal") or None
        self._signal = _signal_path(str(signal)) if signal else None
        self._host = host
        started = time.monotonic()
        shown = started
        probes = 0
        while True:
            probes += 1
            elapsed = time.monotonic() - started
            peer = _peer_failure(self._signal, host)
            if peer is not None:
                result.update(failed=True, changed=False, elapsed_s=round(elapsed, 1),
                              msg=f"{container} stopped waiting: another node of its multi-node group failed "
                                  f"({peer})")
                return result
            state = self._state(container, task_vars)
            # "unhealthy" is not final: a slow start can exhaust the health check's retries and still recover.
            broken = not state["exists"] or not state["running"] or state["restarts"] > 0
            if broken:
                return self._failed(result, container, state, elapsed, "stopped or restarted while starting",
                                    task_vars)
            if state["health"] in ("healthy", "none") and (url is None or self._answers(url, task_vars)):
                elapsed = time.monotonic() - started
                display.display(f"{host}: {container} ready after {elapsed:.0f} s ({probes} probes)")
                result.update(changed=False, elapsed_s=round(elapsed, 1), probes=probes, health=state["health"],
                              msg=f"{container} is healthy" + (f" and {url} answers" if url else ""))
                return result
            if elapsed >= timeout_s:
                return self._failed(result, container, state, elapsed, f"not ready after {timeout_s:.0f} s",
                                    task_vars)
            if time.monotonic() - shown >= progress_s:
                shown = time.monotonic()
                display.display(f"{host}: {container} starting, {shown - started:.0f} s of {timeout_s:.0f} s, "
                                f"health={state['health']}: {self._last_log_line(container, task_vars)}")
            time.sleep(interval_s)

    def _failed(self, result: dict[str, Any], container: str, state: dict[str, Any], elapsed: float, why: str,
                task_vars: dict[str, Any]) -> dict[str, Any]:
        last = self._last_log_line(container, task_vars) if state["exists"] else "(no container)"
        msg = (f"{container} {why} (status={state['status']}, exit code={state['exit_code']}, "
               f"restarts={state['restarts']}, health={state['health']}); last log line: {last}")
        result.update(failed=True, changed=False, elapsed_s=round(elapsed, 1), state=state, msg=msg)
        if self._signal is not None and _peer_failure(self._signal, self._host) is None:
            with open(self._signal, "w", encoding="utf-8") as handle:
                handle.write(f"{self._host}: {msg}")
        return result
