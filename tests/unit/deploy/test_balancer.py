"""The balancer's routing policy and TLS settings (deploy/balancer.py): each policy's HAProxy directives with their
reason, every bad setting refused with what to change (preflight's fleet step runs the same check), and the
rendered haproxy.cfg accepted by HAProxy itself (`haproxy -c`, HAProxy 2.6 as Debian 12 ships it) for each policy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.deploy import vllm_lb_routing
from ansible_collections.vllm_fleet.fleet.plugins.filter.preflight import fleet_lb_inputs
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.balancer import (
    BalancerError,
    balancer_problems,
    routing,
    tls_names,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.balancers import check_balancers

ROOT = Path(__file__).resolve().parents[3]
CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_least_conn_is_today_s_balancing() -> None:
    out = routing({})
    assert out["balance"] == "leastconn" and out["hash_type"] is None and not out["buffer_request"]
    assert out["reason"].startswith("least_conn: balance leastconn")
    assert routing({"vllm_lb_balance": "roundrobin"})["balance"] == "roundrobin"


def test_session_hashes_the_client_header_with_a_load_guard() -> None:
    out = routing({"vllm_lb_policy": "session", "vllm_lb_session_header": "X-Conversation", "vllm_lb_hash_balance_factor": 125})
    assert (out["balance"], out["hash_type"], out["hash_balance_factor"]) == ("hdr(X-Conversation)", "consistent", 125)
    assert "no replica above 125% of the average open requests" in out["reason"]
    assert out["prefix_rules"] == [] and not out["buffer_request"]


def test_cache_aware_hashes_the_prompt_prefix_with_a_load_guard() -> None:
    out = routing({"vllm_lb_policy": "cache_aware", "vllm_lb_prefix_bytes": "512"})
    assert out["balance"] == "hash var(txn.vf_prefix),bytes(0,512)"
    assert out["hash_type"] == "consistent" and out["hash_balance_factor"] == 150 and out["buffer_request"]
    assert out["prefix_rules"][0].endswith("json_query('$.messages[0].content')")
    assert "unless { var(txn.vf_prefix) -m found }" in out["prefix_rules"][1]
    assert "first 512 bytes" in out["reason"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"vllm_lb_policy": "cache-aware"}, "lb: vllm_lb_policy must be one of least_conn, session, cache_aware, got "
                                        "'cache-aware' (did you mean 'cache_aware'?)"),
    ({"vllm_lb_policy": "least_conn", "vllm_lb_balance": "source"}, "lb: vllm_lb_balance must be one of leastconn, "
     "roundrobin, random with vllm_lb_policy least_conn, got 'source'; for affinity set vllm_lb_policy to session or "
     "cache_aware"),
    ({"vllm_lb_policy": "session", "vllm_lb_hash_balance_factor": 100}, "lb: vllm_lb_hash_balance_factor must be 0 "
     "(no load guard) or an integer above 100 (a percentage of the average load; HAProxy suggests 125 to 200), got 100"),
    ({"vllm_lb_policy": "session", "vllm_lb_session_header": "X Session"}, "lb: vllm_lb_session_header must be an "
     "HTTP header name (letters, digits, -), got 'X Session': set the header your clients send with a session id, "
     "like X-Session-Id"),
    ({"vllm_lb_policy": "cache_aware", "vllm_lb_prefix_bytes": 9000}, "lb: vllm_lb_prefix_bytes must be an integer "
     "from 16 to 8192 (the bytes of the prompt that pick the replica), got 9000"),
    ({"vllm_lb_tls": True, "vllm_lb_tls_certificate": CERT}, "lb: vllm_lb_tls is on but vllm_lb_tls_key is empty: "
     "put the certificate's private key (PEM) in an ansible-vault file as vllm_lb_tls_key, or set "
     "vllm_lb_tls_self_signed: true for a lab"),
    ({"vllm_lb_tls": "true", "vllm_lb_tls_key_set": True}, "lb: vllm_lb_tls is on but vllm_lb_tls_certificate holds "
     "no PEM certificate: set it to the certificate (and its chain) in PEM, the key in vllm_lb_tls_key "
     "(ansible-vault), or set vllm_lb_tls_self_signed: true for a lab"),
])
def test_bad_settings_say_what_to_change(settings: dict[str, Any], message: str) -> None:
    assert balancer_problems("lb", settings) == [message]
    with pytest.raises(BalancerError):
        routing(settings)


def test_good_tls_settings_pass() -> None:
    assert balancer_problems("lb", {"vllm_lb_tls": True, "vllm_lb_tls_certificate": CERT,
                                    "vllm_lb_tls_key_set": True}) == []
    assert balancer_problems("lb", {"vllm_lb_tls": True, "vllm_lb_tls_self_signed": True}) == []


def test_the_filter_refuses_with_the_message() -> None:
    with pytest.raises(AnsibleFilterError, match="vllm_lb_routing: vllm_lb: vllm_lb_policy must be one of"):
        vllm_lb_routing({"vllm_lb_policy": "prefix"})


def test_preflight_reads_the_inventory_and_refuses_before_any_host_changes() -> None:
    """fleet_lb_inputs takes the balancer's vllm_lb_* from its host variables (the role's defaults otherwise) and the
    fleet step's balancer check refuses them; the key's value never leaves the filter (only whether it is set)."""
    hostvars = {"lb": {"vllm_lb_policy": "session", "vllm_lb_hash_balance_factor": 90, "vllm_lb_tls": True,
                       "vllm_lb_tls_certificate": CERT, "vllm_lb_tls_key": "-----BEGIN PRIVATE KEY-----x"}}
    lbs = fleet_lb_inputs(["lb"], hostvars, {"vllm_lb_port": 8080, "vllm_lb_session_header": "X-Session-Id"})
    assert lbs["lb"]["settings"]["vllm_lb_tls_key_set"] is True
    assert "vllm_lb_tls_key" not in lbs["lb"]["settings"]
    assert lbs["lb"]["settings"]["vllm_lb_session_header"] == "X-Session-Id"
    errors = check_balancers(lbs, {})
    assert errors == ["lb: vllm_lb_hash_balance_factor must be 0 (no load guard) or an integer above 100 (a percentage "
                      "of the average load; HAProxy suggests 125 to 200), got 90"]


def test_tls_names() -> None:
    assert tls_names("127.0.0.1", ["lb.example.org", "127.0.0.1", "::1"]) == ["IP:127.0.0.1", "DNS:lb.example.org",
                                                                              "IP:::1"]
    assert tls_names("0.0.0.0", ["lb"]) == ["DNS:lb"]
    with pytest.raises(BalancerError, match="list the names clients connect to in vllm_lb_tls_names"):
        tls_names("0.0.0.0", [])


def _render(tmp_path: Path, **extra: Any) -> Path:
    """The role's haproxy.cfg.j2 through Ansible's own templating (the lookup the template module uses)."""
    play = tmp_path / "render.yml"
    out = tmp_path / "haproxy.cfg"
    extra_vars = {"out": str(out), **extra}
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  vars_files: [" + str(ROOT / "roles/vllm_lb/defaults/main.yml")
        + "]\n  tasks:\n"
        "    - ansible.builtin.set_fact:\n"
        "        __vllm_lb_routing: \"{{ {'vllm_lb_policy': vllm_lb_policy, 'vllm_lb_balance': vllm_lb_balance,"
        " 'vllm_lb_session_header': vllm_lb_session_header, 'vllm_lb_hash_balance_factor':"
        " vllm_lb_hash_balance_factor, 'vllm_lb_prefix_bytes': vllm_lb_prefix_bytes} | vllm_fleet.fleet.vllm_lb_routing }}\"\n"
        "        __vllm_lb_tls_pem: /nonexistent/fleet.pem\n"
        "        __vllm_lb_check_body: '{\"model\":\"m\",\"prompt\":\"ok\",\"max_tokens\":1}'\n"
        "    - ansible.builtin.copy:\n"
        "        content: \"{{ lookup('ansible.builtin.template', '" + str(ROOT / "roles/vllm_lb/templates/haproxy.cfg.j2")
        + "') }}\"\n        dest: '{{ out }}'\n        mode: '0644'\n")
    import json
    result = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
                             "-e", json.dumps(extra_vars)], capture_output=True, text=True, check=False,
                            env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "/usr/bin:/bin",
                                 "HOME": str(tmp_path)}, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    return out


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed (the fleet lab installs it)")
@pytest.mark.parametrize("policy", ["least_conn", "session", "cache_aware"])
def test_haproxy_accepts_each_policy(tmp_path: Path, policy: str) -> None:
    cfg = _render(tmp_path, vllm_lb_policy=policy, vllm_lb_check_generate=policy == "session", vllm_lb_stats_port=9,
                  vllm_lb_server_header="X-Vllm-Fleet-Server",
                  vllm_lb_servers=[{"server": "a", "address": "127.0.0.1", "port": 1}])
    text = cfg.read_text()
    check = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr + text
    assert routing({"vllm_lb_policy": policy})["reason"] in text
    if policy == "session":
        assert 'hdr Authorization "Bearer ${VLLM_FLEET_LB_CHECK_KEY}"' in text  # the key stays out of the file
        assert "hash-balance-factor 150" in text
