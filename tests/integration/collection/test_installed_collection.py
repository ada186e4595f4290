"""The collection as its users get it: built into a tarball, installed into a clean collections path, run by FQCN.

Nothing here uses the checkout's ``collections/`` link or its ansible.cfg: the tarball is installed offline (the
dependencies come from the ``ansible`` package's bundled collections), then ``ansible-doc`` lists every module,
filter and role of the installed copy, ``vllm_fleet.fleet.site`` parses with every role it names, and
``vllm_fleet.fleet.preflight`` plans the example fleet from its recorded facts (no host is contacted). No Docker,
no vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.preflight.conftest import Run, run_playbook

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "inventories/example"
HOSTS = ["h100-01", "h100-02", "h100-03", "h100-04", "h200-01", "l40s-01", "t4-01"]
NAME = "vllm_fleet.fleet"


class Installed:
    """The collection built from ROOT and installed under ``root/collections`` (ANSIBLE_COLLECTIONS_PATH)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.collections = root / "collections"
        self.config = root / "ansible.cfg"
        self.config.write_text("[defaults]\n")  # nothing from the checkout's ansible.cfg
        self.env = {"ANSIBLE_CONFIG": str(self.config), "ANSIBLE_COLLECTIONS_PATH": str(self.collections),
                    "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
        self.path = self.collections / "ansible_collections" / "vllm_fleet" / "fleet"

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(self.env)
        proc = subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=self.root, env=env, capture_output=True,
                              text=True, timeout=600, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}"
                                 f"\n{proc.stderr[-3000:]}")
        return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    inst = Installed(tmp_path_factory.mktemp("collection"))
    dist = inst.root / "dist"
    inst.run("ansible-galaxy", "collection", "build", "--output-path", str(dist), str(ROOT))
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    tarball = dist / f"vllm_fleet-fleet-{version}.tar.gz"
    assert tarball.is_file(), sorted(p.name for p in dist.iterdir())
    inst.run("ansible-galaxy", "collection", "install", "--offline", "-p", str(inst.collections), str(tarball))
    return inst


def test_tarball_installs_the_collection_and_no_local_state(installed: Installed) -> None:
    manifest = json.loads((installed.path / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["repository"].startswith("https://github.com/vllm-fleet/")
    files = {f["name"] for f in json.loads((installed.path / "FILES.json").read_text())["files"]}
    assert {"playbooks/site.yml", "playbooks/preflight.yml", "roles/vllm_serve/tasks/main.yml",
            "plugins/modules/gpu_facts.py", "changelogs/changelog.yaml"} <= files
    leaked = sorted(f for f in files if f.split("/")[0] in {".venv", ".cache", ".hypothesis", "collections", "artifacts"}
                    or ".egg-info" in f or "__pycache__" in f)
    assert not leaked, leaked
    listed = installed.run("ansible-galaxy", "collection", "list", NAME, "--format", "json").stdout
    assert json.loads(listed) == {str(installed.collections / "ansible_collections"): {NAME: {"version": manifest[
        "collection_info"]["version"]}}}


def test_requirements_install_offline_from_the_bundled_collections(installed: Installed) -> None:
    """requirements.yml's pins are what the ``ansible`` package bundles: nothing to fetch."""
    proc = installed.run("ansible-galaxy", "collection", "install", "--offline", "-r",
                         str(installed.path / "requirements.yml"))
    assert "Nothing to do" in proc.stdout, proc.stdout


def test_the_installed_code_runs_not_the_checkouts(installed: Installed) -> None:
    """Ansible's collection loader picks the installed copy over the editable install's package mapping."""
    code = ("from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder\n"
            f"_AnsibleCollectionFinder(paths=[{str(installed.collections)!r}])._install()\n"
            "from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import core\n"
            "from ansible_collections.vllm_fleet.fleet.plugins.filter import planner\n"
            "print(core.__file__)\nprint(planner.__file__)\n")
    paths = installed.run("python", "-c", code).stdout.split()
    assert len(paths) == 2 and all(p.startswith(str(installed.path)) for p in paths), paths


def test_ansible_doc_lists_every_module_filter_and_role(installed: Installed) -> None:
    def listed(kind: str) -> set[str]:
        out = installed.run("ansible-doc", "-t", kind, "-l", NAME, "--json").stdout
        return {name.removeprefix(NAME + ".") for name in json.loads(out)}

    modules = {p.stem for p in (ROOT / "plugins/modules").glob("*.py") if p.stem != "__init__"}
    filters = {p.stem for p in (ROOT / "plugins/filter").glob("*.yml")}
    roles = {p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")}
    assert modules and filters and roles
    assert listed("module") == modules
    assert listed("filter") == filters
    assert listed("role") == roles


def test_site_playbook_by_fqcn_parses_with_its_roles(installed: Installed) -> None:
    proc = installed.run("ansible-playbook", f"{NAME}.site", "--syntax-check", "-i", str(EXAMPLE))
    assert f"playbook: {installed.path / 'playbooks/site.yml'}" in proc.stdout, proc.stdout


def test_preflight_by_fqcn_plans_the_example_fleet(installed: Installed) -> None:
    artifacts = installed.root / "artifacts"
    run: Run = run_playbook(f"{NAME}.preflight", EXAMPLE, artifacts, installed.env,
                            ["-e", f"vllm_fleet_recorded_facts_dir={EXAMPLE / 'recorded_facts'}"])
    assert run.rc == 0, run.output[-6000:]
    assert run.recap and all(r["failed"] == 0 and r["unreachable"] == 0 for r in run.recap.values()), run.recap
    plans = json.loads((artifacts / "fleet-plan" / "plans.json").read_text())
    assert sorted(plans) == HOSTS
    assert (artifacts / "fleet-plan" / "index.html").is_file()
    assert "tp x pp" in run.output
