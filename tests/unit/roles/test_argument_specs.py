"""Every role under roles/: meta/argument_specs.yml options == defaults/main.yml keys (style.md C8).

An option that is required and has no default may be left out of defaults/main.yml only if it is
shown there commented out (``# <name>: ...``), so readers of the defaults still see it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir()) if (ROOT / "roles").is_dir() else []
# Roles owned by PROVISION: there the documented defaults must also equal the real ones.
STRICT_DEFAULTS = {"nvidia_driver", "container_runtime", "host_tuning"}


def _load(path: Path) -> dict:
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text())
    return data or {}


def _spec_options(role: Path) -> dict:
    spec = _load(role / "meta" / "argument_specs.yml")
    return spec.get("argument_specs", {}).get("main", {}).get("options", {}) or {}


def test_there_are_roles():
    assert {"nvidia_driver", "container_runtime", "host_tuning"} <= {r.name for r in ROLES}


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_argument_specs_match_defaults(role: Path):
    spec_file = role / "meta" / "argument_specs.yml"
    assert spec_file.exists(), f"{role.name}: meta/argument_specs.yml is missing"
    options = _spec_options(role)
    assert options, f"{role.name}: argument_specs.main.options is empty"
    defaults_file = role / "defaults" / "main.yml"
    defaults = _load(defaults_file)
    defaults_text = defaults_file.read_text() if defaults_file.exists() else ""
    commented = set(re.findall(r"^#\s*([A-Za-z_][A-Za-z0-9_]*)\s*:", defaults_text, re.MULTILINE))
    exempt = {
        name
        for name, opt in options.items()
        if (opt or {}).get("required") and "default" not in (opt or {}) and name in commented
    }
    missing_in_defaults = sorted(set(options) - set(defaults) - exempt)
    missing_in_spec = sorted(set(defaults) - set(options))
    assert not missing_in_defaults, (
        f"{role.name}: in argument_specs but not in defaults/main.yml: {missing_in_defaults}"
    )
    assert not missing_in_spec, (
        f"{role.name}: in defaults/main.yml but not in argument_specs: {missing_in_spec}"
    )


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_public_variables_are_role_prefixed(role: Path):
    for name in _spec_options(role):
        assert name.startswith(role.name + "_"), f"{role.name}: option {name} is not prefixed {role.name}_"


@pytest.mark.parametrize("role_name", sorted(STRICT_DEFAULTS))
def test_documented_defaults_equal_real_defaults(role_name: str):
    role = ROOT / "roles" / role_name
    defaults = _load(role / "defaults" / "main.yml")
    for name, opt in _spec_options(role).items():
        assert opt.get("description"), f"{name}: no description"
        assert opt.get("type"), f"{name}: no type"
        if "default" in opt:
            assert opt["default"] == defaults[name], (
                f"{name}: spec default {opt['default']!r} != {defaults[name]!r}"
            )
