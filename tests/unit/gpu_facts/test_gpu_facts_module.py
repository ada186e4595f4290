"""vllm_fleet.fleet.gpu_facts run in-process, with run_command / get_bin_path replaying a fixture
(community.general's modprobe test style, written with pytest fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.nvidia_smi import PCIE_ARGS, QUERY_GPU_ARGS
from ansible_collections.vllm_fleet.fleet.plugins.modules import gpu_facts as module

from ._gpu_fixtures import FIXTURES, NEW_GPU_KEYS, fixture_names, load_json, read

SMI = "/usr/bin/nvidia-smi"
DMESG = "/usr/bin/dmesg"


class Host:
    """A fake host made of one fixture folder: answers get_bin_path and run_command, records the calls."""

    def __init__(self, name: str, nvidia_smi: bool = True) -> None:
        self.name = name
        self.nvidia_smi = nvidia_smi and load_json(name, "meta.json").get("nvidia_smi", True)
        self.calls: list[tuple[list[str], dict[str, str] | None]] = []
        self.rc = load_json(name, "meta.json").get("rc", {})

    def get_bin_path(self, arg: str) -> str | None:
        if arg == "nvidia-smi":
            return SMI if self.nvidia_smi else None
        if arg in ("nproc", "lscpu", "dmesg") and read(self.name, arg + ".txt") is not None:
            return "/usr/bin/" + arg
        return None

    def run_command(self, args: Any, **kwargs: Any) -> tuple[int, str, str]:
        assert isinstance(args, list), "commands must be argument lists, never shell strings"
        self.calls.append((list(args), kwargs.get("environ_update")))
        if args == ["/usr/bin/nproc"]:
            return 0, read(self.name, "nproc.txt") or "", ""
        if args == ["/usr/bin/lscpu"]:
            return 0, read(self.name, "lscpu.txt") or "", ""
        if args == [DMESG]:
            return 0, read(self.name, "dmesg.txt") or "", ""
        assert args[0] == SMI
        if tuple(args[1:]) == PCIE_ARGS:  # the whole -q text; a folder without it: a failed call
            text = read(self.name, "nvidia-smi-q.txt")
            return (0, text, "") if text is not None else (2, "Invalid combination of input arguments.", "")
        key, filename = {
            (): ("nvidia-smi", "nvidia-smi.txt"),
            QUERY_GPU_ARGS: ("query-gpu", "query-gpu.csv"),
            ("topo", "-m"): ("topo", "topo.txt"),
            ("-L",): ("list", "list.txt"),
        }[tuple(args[1:])]
        text = read(self.name, filename)
        assert text is not None, f"{self.name} has no {filename} but the module ran {args}"
        return self.rc.get(key, 0), text, ""

    def smi_calls(self) -> list[list[str]]:
        return [argv[1:] for argv, _env in self.calls if argv[0] == SMI]


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Host:
    """Host(fixture name) through indirect parametrisation; patches AnsibleModule and the host files."""
    name, smi = request.param if isinstance(request.param, tuple) else (request.param, True)
    fake = Host(name, smi)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda _self, arg, *_a, **_kw: fake.get_bin_path(arg))
    monkeypatch.setattr(AnsibleModule, "run_command", lambda _self, args, **kw: fake.run_command(args, **kw))
    monkeypatch.setattr(module, "_MEMINFO", str(FIXTURES / name / "meminfo.txt"))
    monkeypatch.setattr(module, "_NODE_ONLINE", str(FIXTURES / name / "node-online.txt"))
    monkeypatch.setattr(module.platform, "machine", lambda: "x86_64")
    return fake


def run(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    out = capsys.readouterr().out
    assert "Traceback" not in out
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.mark.parametrize("host", fixture_names("facts"), indirect=True)
def test_facts_for_every_fixture(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys)
    assert result["changed"] is False
    assert "failed" not in result
    assert result["ansible_facts"]["gpu"] == load_json(host.name, "expected_facts.json")
    assert result["source"] == ("nvidia-smi" if host.nvidia_smi else "none")
    for _argv, env in host.calls:
        assert env is not None and env["LC_ALL"] == "C"


@pytest.mark.parametrize("host", fixture_names("facts"), indirect=True)
def test_check_mode_gives_the_same_facts(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    normal = run(capsys)
    check = run(capsys, _ansible_check_mode=True)
    assert check["changed"] is False
    assert check["ansible_facts"] == normal["ansible_facts"]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("l4_x1", [[*QUERY_GPU_ARGS], [], [*PCIE_ARGS]]),
        ("h100_device", [[*QUERY_GPU_ARGS], [], ["-q"]]),
        ("h200x2", [[*QUERY_GPU_ARGS], [], ["topo", "-m"], [*PCIE_ARGS]]),
        ("a100_80gb_mig", [[*QUERY_GPU_ARGS], [], ["-L"], [*PCIE_ARGS]]),
        ("cpu_only", []),
    ],
    indirect=["host"],
)
def test_runs_only_the_commands_it_needs(
    host: Host, expected: list[list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys)
    assert host.smi_calls() == expected


@pytest.mark.parametrize("host", fixture_names("error"), indirect=True)
def test_nvidia_smi_failures_fail_the_task(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    expected = load_json(host.name, "expected_error.json")
    result = run(capsys)
    assert result["failed"] is True
    assert result["changed"] is False
    for part in expected["message_contains"]:
        assert part in result["msg"]
    assert "ansible_facts" not in result
    if expected["rc"]:
        assert result["rc"] == expected["rc"]
        assert result["stdout"] == read(host.name, "query-gpu.csv")


@pytest.mark.parametrize("host", [("cpu_only", False)], indirect=True)
def test_require_gpu_without_nvidia_smi_fails(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys)["ansible_facts"]["gpu"]["gpus"] == []
    result = run(capsys, require_gpu=True)
    assert result["failed"] is True
    assert "nvidia-smi is not installed" in result["msg"]
    assert "nvidia_driver" in result["msg"]


@pytest.mark.parametrize("host", ["h100x8_nvswitch"], indirect=True)
def test_require_gpu_with_gpus_and_return_raw(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, require_gpu=True, return_raw=True)
    assert result["ansible_facts"]["gpu"]["gpu_count"] == 8
    assert result["raw"]["query_gpu"] == read("h100x8_nvswitch", "query-gpu.csv")
    assert result["raw"]["topo"] == read("h100x8_nvswitch", "topo.txt")
    assert result["raw"]["meminfo"] == read("h100x8_nvswitch", "meminfo.txt")
    assert "raw" not in run(capsys)


@pytest.mark.parametrize("host", ["h200x2"], indirect=True)
def test_broken_topology_fails_cleanly(
    host: Host, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = host.run_command

    def broken_topo(_module: AnsibleModule, args: Any, **kwargs: Any) -> tuple[int, str, str]:
        if args[1:] == ["topo", "-m"]:
            return 0, "GPU0\tGPU1\nGPU0\t X \tNV18\n", ""
        return original(args, **kwargs)

    monkeypatch.setattr(AnsibleModule, "run_command", broken_topo)
    result = run(capsys)
    assert result["failed"] is True
    assert "nvidia-smi topo -m" in result["msg"]


@pytest.mark.parametrize("host", ["h200x2"], indirect=True)
def test_plain_nvidia_smi_failing_after_the_query(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    host.rc = {"nvidia-smi": 15}
    result = run(capsys)
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia-smi failed (rc 15)")


# ----------------------------------------------------------------------------- facts_file


@pytest.mark.parametrize("host", [("cpu_only", False)], indirect=True)
@pytest.mark.parametrize("name", ["h100x8_nvswitch", "l40s_x4_pcie", "a100_80gb_mig", "h200_device"])
def test_facts_file_is_returned_without_probing(
    host: Host, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "facts.json"
    shutil.copyfile(FIXTURES / name / "expected_facts.json", path)
    result = run(capsys, facts_file=str(path), require_gpu=True)
    assert result["changed"] is False
    assert result["source"] == "facts_file"
    assert result["ansible_facts"]["gpu"] == load_json(name, "expected_facts.json")
    assert host.calls == []


@pytest.mark.parametrize("host", [("cpu_only", False)], indirect=True)
def test_facts_file_may_be_a_saved_module_result(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    """The capture was made before the PCIe link and Xid keys existed: they come back as None (unknown)."""
    result = run(capsys, facts_file=str(FIXTURES / "h200_device" / "module_result.json"))
    expected = load_json("h200_device", "expected_facts.json")
    for gpu in expected["gpus"]:
        gpu.update(dict.fromkeys(NEW_GPU_KEYS))
    assert result["ansible_facts"]["gpu"] == expected


@pytest.mark.parametrize("host", [("cpu_only", False)], indirect=True)
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot be read"),
        ("{not json", "is not JSON: Expecting property name"),
        ('{"gpus": []}', "missing key 'gpu_count'"),
        ('{"gpu": {"gpus": [], "gpu_count": "0"}}', "'gpu_count' is '0' (str), expected int"),
    ],
)
def test_bad_facts_file(
    host: Host, content: str | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "facts.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    result = run(capsys, facts_file=str(path))
    assert result["failed"] is True
    assert message in result["msg"]
    assert str(path) in result["msg"]


@pytest.mark.parametrize("host", [("cpu_only", False)], indirect=True)
def test_facts_file_without_gpu_and_require_gpu(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "cpu_only" / "expected_facts.json")
    assert run(capsys, facts_file=path)["ansible_facts"]["gpu"]["gpu_count"] == 0
    result = run(capsys, facts_file=path, require_gpu=True)
    assert result["failed"] is True
    assert "lists no GPU" in result["msg"]


@pytest.mark.parametrize("host", ["h200x2"], indirect=True)
def test_unreadable_meminfo_fails(
    host: Host, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "_MEMINFO", "/nonexistent/meminfo")
    result = run(capsys)
    assert result["failed"] is True
    assert "needs a Linux host" in result["msg"]


def test_unknown_option_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, require_gpus=True)
    assert result["failed"] is True
    assert "require_gpus" in result["msg"]


# ----------------------------------------------------------------------------- documentation


def test_documentation_matches_the_argument_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(module.DOCUMENTATION)
    captured: dict[str, Any] = {}

    def fake_init(
        self: AnsibleModule, argument_spec: dict[str, Any], supports_check_mode: bool = False
    ) -> None:
        captured.update(spec=argument_spec, check_mode=supports_check_mode)

    monkeypatch.setattr(AnsibleModule, "__init__", fake_init)
    module.build_module()
    spec = captured["spec"]
    assert captured["check_mode"] is True
    assert doc["module"] == "gpu_facts"
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert sorted(doc["options"]) == sorted(spec)
    for name, option in doc["options"].items():
        assert option["type"] == spec[name]["type"]
        assert option.get("default") == spec[name].get("default")
    examples = yaml.safe_load(module.EXAMPLES)
    assert all("vllm_fleet.fleet.gpu_facts" in task or "ansible.builtin.debug" in task for task in examples)
    returned = yaml.safe_load(module.RETURN)
    contract = set(returned["ansible_facts"]["contains"]["gpu"]["contains"])
    assert contract == set(load_json("h200x2", "expected_facts.json"))
    source = Path(module.__file__).read_text(encoding="utf-8")
    assert source.index("RETURN = ") < source.index("\nimport ")
