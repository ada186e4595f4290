"""The vllm_serve role's documentation of the launch settings cannot drift from their records
(plugins/plugin_utils/deploy/launch.py LAUNCH_SETTINGS), as test_argument_specs.py keeps argument specs and defaults
together: the README's table (names, types, defaults, scope, help), the defaults file's commented list (names and
defaults), the argument spec (a launch setting is no role option, except the one deploy.yml also passes: its type and
default agree), and the role's tasks, which read a launch setting only from the record (vllm_serve_launch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LAUNCH_SETTINGS,
    LaunchSetting,
)

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "vllm_serve"
START, END = "launch-settings:start", "launch-settings:end"
#: The argument spec's type of each kind of launch setting.
SPEC_TYPES = {"str": "str", "int": "int", "port": "int", "list": "list", "bool": "bool", "choice": "str"}


def _block(text: str, where: str) -> str:
    assert text.count(START) == 1 and text.count(END) == 1, f"{where}: one {START} ... {END} block"
    return text.split(START, 1)[1].split(END, 1)[0]


def _options() -> dict[str, Any]:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options: dict[str, Any] = spec["argument_specs"]["main"]["options"]
    return options


def _role_inputs() -> set[str]:
    return set(_options())


def _documented() -> list[LaunchSetting]:
    """The launch settings documented as such (the ones that are also role options are documented there)."""
    return [s for s in LAUNCH_SETTINGS if s.variable not in _role_inputs()]


def _type(setting: LaunchSetting) -> str:
    if setting.kind == "choice":
        return " \\| ".join(f"`{c}`" for c in setting.choices)
    if setting.kind == "list":
        return "list of str"
    if setting.kind == "int" and setting.minimum:
        return f"int ≥ {setting.minimum}"
    return setting.kind


def _default(setting: LaunchSetting) -> str:
    return "(derived)" if setting.default is None else f"`{json.dumps(setting.default)}`"


def readme_table() -> str:
    """The README's table, rendered from the records."""
    rows = ["| Variable | Type | Default | Per | Meaning |", "|---|---|---|---|---|"]
    rows += [f"| `{s.variable}` | {_type(s)} | {_default(s)} | {s.scope} | {s.help} |" for s in _documented()]
    return "\n".join(rows)


def test_the_readme_table_is_the_records() -> None:
    block = _block((ROLE / "README.md").read_text(), "roles/vllm_serve/README.md")
    table = "\n".join(line for line in block.strip().splitlines() if line.startswith("|"))
    assert table == readme_table(), f"roles/vllm_serve/README.md: replace the table with\n{readme_table()}"


def test_the_defaults_file_lists_every_setting_with_its_default() -> None:
    text = (ROLE / "defaults" / "main.yml").read_text()
    listed = re.findall(r"^#\s*(vllm_serve_\w+):\s*(.*)$", _block(text, "defaults/main.yml"), re.MULTILINE)
    assert [name for name, _value in listed] == [s.variable for s in _documented()]
    for (name, value), setting in zip(listed, _documented(), strict=True):
        assert yaml.safe_load(value) == setting.default, f"defaults/main.yml: {name}: {value} != {setting.default!r}"
    real = yaml.safe_load(text) or {}
    assert not {s.variable for s in _documented()} & set(real), "a launch setting is a role default: the role " \
        "would read its own copy instead of the launch record's"


def test_a_launch_setting_is_a_role_option_only_where_deploy_passes_it_and_then_agrees() -> None:
    options = _options()
    both = [s for s in LAUNCH_SETTINGS if s.variable in options]
    assert [s.variable for s in both] == ["vllm_serve_image"]  # the image stage's ref exists only after preflight
    for setting in both:
        option = options[setting.variable]
        assert option["type"] == SPEC_TYPES[setting.kind]
        assert option.get("default") == ("" if setting.default is None else setting.default)


#: Task keywords whose strings are Jinja expressions without braces.
_BARE = {"when", "that", "until", "changed_when", "failed_when"}


def _expressions(node: Any, bare: bool = False) -> list[str]:
    """The Jinja a task file evaluates: what is inside ``{{ }}``, and the bare conditions (not messages)."""
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in _expressions(v, bare=str(k) in _BARE)]
    if isinstance(node, list):
        return [e for v in node for e in _expressions(v, bare)]
    if isinstance(node, str):
        return [node] if bare else re.findall(r"{{(.*?)}}", node, re.S)
    return []


def test_the_role_reads_launch_settings_only_from_the_record() -> None:
    names = {s.variable for s in _documented()}
    files = sorted((ROLE / "tasks").glob("*.yml"))
    for path in files:
        used = {n for e in _expressions(yaml.safe_load(path.read_text())) for n in re.findall(r"\bvllm_serve_\w+", e)}
        assert not used & names, f"{path.relative_to(ROOT)} reads {sorted(used & names)}: read them from " \
            "vllm_serve_launch"
    templates = [p.read_text() for p in (ROLE / "templates").glob("*")]
    assert not {n for t in templates for n in re.findall(r"\bvllm_serve_\w+", t)} & names
    # the walk sees what the tasks read (it is not vacuous)
    main = _expressions(yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()))
    assert any("vllm_serve_launch.config_dir" in e for e in main)
    assert any("vllm_serve_state" in e for e in main)


def test_the_table_check_can_fail() -> None:
    """A changed default shows up in the rendered table (the comparison above is not vacuous)."""
    assert "`8000`" in readme_table() and "| `vllm_serve_port` | port | `8000` | replica |" in readme_table()
