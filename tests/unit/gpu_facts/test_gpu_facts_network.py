"""gpu_facts' network discovery: the pure parsers (module_utils/network_facts.py) on recorded ``ip`` output and
constructed sysfs trees, and the module run in-process with ``ip`` and the sysfs paths replayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.network_facts import (
    IP_ADDR_JSON_ARGS,
    IP_ADDR_TEXT_ARGS,
    IP_LINK_TEXT_ARGS,
    NetworkFactsError,
    build_network,
    empty_network,
    parse_ip_json,
    parse_ip_text,
    parse_rdma,
    validate_network,
)
from ansible_collections.vllm_fleet.fleet.plugins.modules import gpu_facts as module

from ._gpu_fixtures import FIXTURES as GPU_FIXTURES
from ._gpu_fixtures import load_json as load_gpu_json

NET = Path(__file__).resolve().parents[2] / "fixtures" / "network"
IP = "/usr/sbin/ip"

#: The development machine's interfaces as recorded in tests/fixtures/network (ip -j addr show).
CAPTURED = [
    {"name": "lo", "ipv4": ["127.0.0.1/8"], "ipv6": ["::1/128"], "up": True, "mtu": 65536},
    {"name": "ifb0", "ipv4": [], "ipv6": [], "up": False, "mtu": 1500},
    {"name": "ifb1", "ipv4": [], "ipv6": [], "up": False, "mtu": 1500},
    {"name": "eth0", "ipv4": ["192.0.2.2/24"], "ipv6": ["fd00::2/64", "fe80::fc:ff:fe00:1/64"], "up": True,
     "mtu": 1400},
]
RDMA_FIXTURES = sorted(p.name for p in NET.glob("*.json") if p.name.startswith(("constructed-", "observed-")))


def text(name: str) -> str:
    return (NET / name).read_text(encoding="utf-8")


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text(name))
    return data


# ----------------------------------------------------------------------------- parsers


def test_ip_json_capture() -> None:
    assert parse_ip_json(text("ip-j-addr-show.json")) == CAPTURED


def test_ip_text_capture_with_links_is_the_json_result() -> None:
    assert parse_ip_text(text("ip-o-addr-show.txt"), text("ip-o-link-show.txt")) == CAPTURED


def test_ip_text_capture_without_links() -> None:
    assert parse_ip_text(text("ip-o-addr-show.txt")) == [
        {"name": "lo", "ipv4": ["127.0.0.1/8"], "ipv6": ["::1/128"], "up": None, "mtu": None},
        {"name": "eth0", "ipv4": ["192.0.2.2/24"], "ipv6": ["fd00::2/64", "fe80::fc:ff:fe00:1/64"], "up": None,
         "mtu": None},
    ]


def test_ip_text_vlan_and_point_to_point() -> None:
    link = ("7: eth0.100@eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP\\    link/ether x\n"
            "8: tun0: <POINTOPOINT,NOARP> mtu 1420 qdisc noop state DOWN\\    link/none\n")
    addr = ("7: eth0.100    inet 10.1.0.5/16 brd 10.1.255.255 scope global eth0.100\\  valid_lft forever\n"
            "8: tun0    inet 10.8.0.1 peer 10.8.0.2/32 scope global tun0\\  valid_lft forever\n"
            "8: tun0    inet6 fd01::1 scope global\\  valid_lft forever\n")
    assert parse_ip_text(addr, link) == [
        {"name": "eth0.100", "ipv4": ["10.1.0.5/16"], "ipv6": [], "up": True, "mtu": 9000},
        {"name": "tun0", "ipv4": ["10.8.0.1/32"], "ipv6": ["fd01::1/128"], "up": False, "mtu": 1420},
    ]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ('Option "-j" is unknown, try "ip -help".\n', "did not print JSON"),
        ('{"ifname": "eth0"}', "printed a dict, expected a list"),
        ('[{"flags": []}]', "an entry without ifname"),
    ],
)
def test_ip_json_refuses_what_is_not_iproute2_json(output: str, message: str) -> None:
    with pytest.raises(NetworkFactsError, match=message):
        parse_ip_json(output)


def test_ip_text_refuses_garbage() -> None:
    with pytest.raises(NetworkFactsError, match="ip -o addr show: unexpected line"):
        parse_ip_text("Usage: ip [ OPTIONS ] OBJECT { COMMAND | help }\n")
    with pytest.raises(NetworkFactsError, match="ip -o link show: unexpected line"):
        parse_ip_text("", "Usage: ip link\n")


def test_ip_json_skips_odd_address_entries() -> None:
    out = parse_ip_json('[{"ifname": "x", "flags": "UP", "mtu": true, "addr_info": [{"family": "link"}, 3,'
                        ' {"family": "inet", "local": "10.0.0.1", "prefixlen": 8}]}]')
    assert out == [{"name": "x", "ipv4": ["10.0.0.1/8"], "ipv6": [], "up": None, "mtu": None}]


@pytest.mark.parametrize("name", RDMA_FIXTURES)
def test_rdma_trees(name: str) -> None:
    data = fixture(name)
    network = build_network([], parse_rdma(data["sys_class_infiniband"]), data["dev_infiniband"])
    assert network["rdma"] == data["expected"]["rdma"]
    assert network["rdma_dev_nodes"] == data["expected"]["rdma_dev_nodes"]
    assert validate_network(network) == network


def test_rdma_unreadable_files_and_ambiguous_netdevs() -> None:
    out = parse_rdma({
        "mlx4_0/ports/1/state": None,
        "mlx4_0/ports/1/link_layer": "InfiniBand\n",
        "mlx4_0/device/net/ib0/dev_port": None,
        "mlx4_0/device/net/ib1/dev_port": None,
        "mlx5_9/ports/1/state": "ACTIVE",  # no "N: " prefix: kept as written
        "mlx5_9/ports/x/state": "4: ACTIVE",  # not a port number: ignored
    })
    assert out == [
        {"device": "mlx4_0", "port": 1, "link_layer": "InfiniBand", "state": None, "netdev": None},
        {"device": "mlx5_9", "port": 1, "link_layer": None, "state": "ACTIVE", "netdev": None},
    ]


def test_ports_sort_numerically() -> None:
    tree = {f"mlx5_0/ports/{p}/state": "4: ACTIVE" for p in (10, 2, 1)}
    assert [p["port"] for p in parse_rdma(tree)] == [1, 2, 10]


def test_empty_network_is_valid() -> None:
    assert validate_network(empty_network()) == {"interfaces": [], "rdma": [], "rdma_dev_nodes": []}


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ([], "expected an object, got list"),
        ({"interfaces": [], "rdma": []}, "'rdma_dev_nodes' must be a list"),
        ({"interfaces": [{"name": ""}], "rdma": [], "rdma_dev_nodes": []}, "interfaces[0]: 'name' must be"),
        ({"interfaces": [{"name": "eth0", "ipv4": ["10.0.0.1"], "ipv6": []}], "rdma": [], "rdma_dev_nodes": []},
         "'ipv4' must be a list of ADDRESS/PREFIX"),
        ({"interfaces": [{"name": "eth0", "ipv4": [], "ipv6": [], "up": "yes"}], "rdma": [], "rdma_dev_nodes": []},
         "'up' must be true, false or null"),
        ({"interfaces": [{"name": "eth0", "ipv4": [], "ipv6": [], "mtu": True}], "rdma": [], "rdma_dev_nodes": []},
         "'mtu' must be an int or null"),
        ({"interfaces": [], "rdma": [{"device": "mlx5_0", "port": "1"}], "rdma_dev_nodes": []},
         "rdma[0]: 'port' must be an int"),
        ({"interfaces": [], "rdma": [{"device": "mlx5_0", "port": 1, "state": 4}], "rdma_dev_nodes": []},
         "'state' must be a string or null"),
        ({"interfaces": [], "rdma": [], "rdma_dev_nodes": [1]}, "must be a list of paths"),
    ],
)
def test_validate_network_names_the_bad_entry(network: Any, message: str) -> None:
    with pytest.raises(NetworkFactsError) as caught:
        validate_network(network)
    assert message in str(caught.value)


# ----------------------------------------------------------------------------- the module


class NetHost:
    """A CPU-lane host whose `ip` answers from a table; records the commands."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]] | None) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], dict[str, str] | None]] = []

    def get_bin_path(self, arg: str) -> str | None:
        return IP if arg == "ip" and self.answers is not None else None

    def run_command(self, args: Any, **kwargs: Any) -> tuple[int, str, str]:
        assert isinstance(args, list) and args[0] == IP, f"unexpected command {args}"
        self.calls.append((list(args), kwargs.get("environ_update")))
        assert self.answers is not None
        return self.answers[tuple(args[1:])]

    def ip_calls(self) -> list[tuple[str, ...]]:
        return [tuple(argv[1:]) for argv, _env in self.calls]


JSON_OK = {IP_ADDR_JSON_ARGS: (0, text("ip-j-addr-show.json"), "")}
NO_JSON = {
    IP_ADDR_JSON_ARGS: (255, "", 'Option "-j" is unknown, try "ip -help".\n'),
    IP_ADDR_TEXT_ARGS: (0, text("ip-o-addr-show.txt"), ""),
    IP_LINK_TEXT_ARGS: (0, text("ip-o-link-show.txt"), ""),
}


def make_tree(root: Path, data: dict[str, Any]) -> tuple[Path, Path]:
    """Materialise a constructed fixture: (sys/class/infiniband, dev/infiniband)."""
    sys_ib, dev_ib = root / "sys" / "class" / "infiniband", root / "dev" / "infiniband"
    sys_ib.mkdir(parents=True)
    dev_ib.mkdir(parents=True)
    for rel, content in data["sys_class_infiniband"].items():
        path = sys_ib / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    for name in data["dev_infiniband"]:
        (dev_ib / name).touch()
    return sys_ib, dev_ib


@pytest.fixture
def patch_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """patch_host(answers, rdma_fixture=None) → NetHost; no sysfs tree unless a fixture is named."""

    def apply(answers: dict[tuple[str, ...], tuple[int, str, str]] | None, rdma: str | None = None) -> NetHost:
        fake = NetHost(answers)
        monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda _s, arg, *_a, **_k: fake.get_bin_path(arg))
        monkeypatch.setattr(AnsibleModule, "run_command", lambda _s, args, **kw: fake.run_command(args, **kw))
        monkeypatch.setattr(module, "_MEMINFO", str(GPU_FIXTURES / "cpu_only" / "meminfo.txt"))
        monkeypatch.setattr(module, "_NODE_ONLINE", str(GPU_FIXTURES / "cpu_only" / "node-online.txt"))
        monkeypatch.setattr(module.platform, "machine", lambda: "x86_64")
        if rdma is None:
            monkeypatch.setattr(module, "_SYS_INFINIBAND", str(tmp_path / "absent" / "infiniband"))
            monkeypatch.setattr(module, "_DEV_INFINIBAND", str(tmp_path / "absent" / "dev"))
        else:
            sys_ib, dev_ib = make_tree(tmp_path, fixture(rdma))
            monkeypatch.setattr(module, "_SYS_INFINIBAND", str(sys_ib))
            monkeypatch.setattr(module, "_DEV_INFINIBAND", str(dev_ib))
        return fake

    return apply


def run(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    out = capsys.readouterr().out
    assert "Traceback" not in out
    result: dict[str, Any] = json.loads(out)
    return result


def test_module_reports_interfaces_and_rdma(patch_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    host = patch_host(JSON_OK, "constructed-ib-roce.json")
    result = run(capsys)
    expected = fixture("constructed-ib-roce.json")["expected"]
    assert result["ansible_facts"]["network"] == {"interfaces": CAPTURED, **expected}
    assert result["ansible_facts"]["gpu"]["gpu_count"] == 0  # Contract 1 untouched
    assert "network" not in result["ansible_facts"]["gpu"]
    assert host.ip_calls() == [IP_ADDR_JSON_ARGS]
    assert all(env is not None and env["LC_ALL"] == "C" for _argv, env in host.calls)


def test_module_falls_back_to_ip_text(patch_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    host = patch_host(NO_JSON)
    result = run(capsys, return_raw=True)
    assert result["ansible_facts"]["network"] == {"interfaces": CAPTURED, "rdma": [], "rdma_dev_nodes": []}
    assert host.ip_calls() == [IP_ADDR_JSON_ARGS, IP_ADDR_TEXT_ARGS, IP_LINK_TEXT_ARGS]
    assert result["raw"]["ip_addr"] == text("ip-o-addr-show.txt")
    assert result["raw"]["infiniband"] == {}


def test_module_falls_back_when_json_is_garbage(patch_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    host = patch_host({**NO_JSON, IP_ADDR_JSON_ARGS: (0, "Usage: ip [ OPTIONS ] OBJECT\n", "")})
    assert run(capsys)["ansible_facts"]["network"]["interfaces"] == CAPTURED
    assert len(host.ip_calls()) == 3


@pytest.mark.parametrize(
    "answers",
    [
        None,  # no ip at all
        {**NO_JSON, IP_ADDR_JSON_ARGS: (1, "", "x"), IP_ADDR_TEXT_ARGS: (1, "", "Cannot open netlink socket")},
        {**NO_JSON, IP_ADDR_JSON_ARGS: (1, "", "x"), IP_ADDR_TEXT_ARGS: (0, "garbage\n", "")},
    ],
    ids=["no-ip", "ip-fails", "ip-garbage"],
)
def test_module_never_fails_on_the_network(
    patch_host: Any, answers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_host(answers)
    result = run(capsys)
    assert "failed" not in result
    assert result["ansible_facts"]["network"] == empty_network()


def test_module_text_fallback_without_links(patch_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    patch_host({**NO_JSON, IP_LINK_TEXT_ARGS: (255, "", "nope")})
    names = [i["name"] for i in run(capsys)["ansible_facts"]["network"]["interfaces"]]
    assert names == ["lo", "eth0"]


@pytest.mark.parametrize("name", RDMA_FIXTURES)
def test_module_reads_each_sysfs_tree(name: str, patch_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    patch_host(None, name)
    network = run(capsys)["ansible_facts"]["network"]
    assert {k: network[k] for k in ("rdma", "rdma_dev_nodes")} == fixture(name)["expected"]


def test_check_mode_gives_the_same_network(patch_host: Any, capsys: pytest.CaptureFixture[str]) -> None:
    patch_host(JSON_OK, "constructed-ib-down.json")
    assert run(capsys, _ansible_check_mode=True)["ansible_facts"] == run(capsys)["ansible_facts"]


# ----------------------------------------------------------------------------- facts_file


def test_facts_file_without_network_stays_valid(
    patch_host: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = patch_host(JSON_OK)
    path = GPU_FIXTURES / "h200x2" / "expected_facts.json"
    result = run(capsys, facts_file=str(path))
    assert result["ansible_facts"] == {"gpu": load_gpu_json("h200x2", "expected_facts.json"), "network": None}
    assert host.calls == []


def test_facts_file_with_network_inside_the_gpu_facts(
    patch_host: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_host(JSON_OK)
    network = {"interfaces": CAPTURED, **fixture("constructed-ib-roce.json")["expected"]}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({**load_gpu_json("h200x2", "expected_facts.json"), "network": network}))
    assert run(capsys, facts_file=str(path))["ansible_facts"]["network"] == network


def test_facts_file_may_be_a_saved_result_with_network(
    patch_host: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_host(JSON_OK)
    saved = run(capsys)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(saved))
    result = run(capsys, facts_file=str(path))
    assert result["ansible_facts"] == saved["ansible_facts"]
    assert result["source"] == "facts_file"


def test_facts_file_with_bad_network_fails(
    patch_host: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch_host(JSON_OK)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({**load_gpu_json("h200x2", "expected_facts.json"), "network": {"interfaces": 1}}))
    result = run(capsys, facts_file=str(path))
    assert result["failed"] is True
    assert str(path) in result["msg"]
    assert "'interfaces' must be a list" in result["msg"]
    assert "re-run discovery" in result["msg"]


def test_return_documents_the_network_facts() -> None:
    yaml = pytest.importorskip("yaml")
    returned = yaml.safe_load(module.RETURN)["ansible_facts"]["contains"]["network"]["contains"]
    assert set(returned) == set(empty_network())
    assert set(returned["interfaces"]["sample"][0]) == set(CAPTURED[0])
    assert set(returned["rdma"]["sample"][0]) == set(fixture("constructed-ib-roce.json")["expected"]["rdma"][0])
