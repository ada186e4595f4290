# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""How the load balancer routes, probes and encrypts: the fleet's routing policy turned into HAProxy's
directives, each with a one-line reason, and the settings checked with messages that say what to change.

Policies (``vllm_lb_policy``):

- ``least_conn``: the server with the fewest open requests (``balance leastconn``; ``vllm_lb_balance`` may pick
  ``roundrobin`` or ``random``). No affinity: a fleet's shared prompts land on every replica.
- ``session``: consistent hashing on a header the client chooses (``balance hdr(<vllm_lb_session_header>)``,
  ``hash-type consistent``) with bounded load (``hash-balance-factor``): a session's requests stay on one replica
  (its prefix cache) unless that replica holds more than the factor times the average of open requests.
- ``cache_aware``: consistent hashing on the first ``vllm_lb_prefix_bytes`` bytes of the prompt (chat: the first
  message's content, usually the shared system prompt; completions: ``prompt``), with the same bounded load:
  requests that share a prefix go to the replica that cached it, and a hot prefix spills over to others once its
  replica holds more than the factor times the average. A request whose prefix cannot be read (a body larger than
  HAProxy's buffer, a body that is not JSON) falls back to round robin (HAProxy's rule for an empty hash key).

HAProxy 2.6 (Debian 12), configuration.txt: ``balance hash <expr>`` and ``hdr(<name>)`` (lines 4250, 4339),
``hash-balance-factor`` "0 ... or greater than 100", reasonable 125 to 200 (5535-5556), ``json_query``
(17194), ``option http-buffer-request`` (8916: the routing decision waits for the body, up to tune.bufsize,
16384 bytes by default).
Pure (stdlib only, typed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULTS", "POLICIES", "BalancerError", "balancer_problems", "routing", "tls_names"]

POLICIES = ("least_conn", "session", "cache_aware")
_ALGORITHMS = ("leastconn", "roundrobin", "random")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an HTTP token (RFC 9110 section 5.6.2)
# The prefix is read from HAProxy's request buffer (tune.bufsize, 16384 bytes by default): a key longer than
# what the buffer holds of the body cannot be read whole.
PREFIX_BYTES_MAX = 8192
DEFAULTS: dict[str, Any] = {
    "vllm_lb_policy": "least_conn", "vllm_lb_balance": "leastconn", "vllm_lb_session_header": "X-Session-Id",
    "vllm_lb_hash_balance_factor": 150, "vllm_lb_prefix_bytes": 256,
    "vllm_lb_tls": False, "vllm_lb_tls_self_signed": False, "vllm_lb_tls_certificate": "",
}


class BalancerError(ValueError):
    """Bad balancer settings; the message says what to change."""


def _nearest(value: str, choices: tuple[str, ...]) -> str:
    import difflib

    match = difflib.get_close_matches(value.lower().replace("-", "_"), choices, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _int(settings: Mapping[str, Any], name: str) -> int | None:
    value = settings.get(name, DEFAULTS[name])
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _bool(settings: Mapping[str, Any], name: str) -> bool:
    value = settings.get(name, DEFAULTS[name])
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def balancer_problems(name: str, settings: Mapping[str, Any]) -> list[str]:
    """Every problem of one balancer's routing and TLS settings, one line each naming what to change.

    :param name: the balancer's inventory name (in each message)
    :param settings: its ``vllm_lb_*`` variables (missing ones take the role's defaults)
    """
    errors: list[str] = []
    policy = settings.get("vllm_lb_policy", DEFAULTS["vllm_lb_policy"])
    if policy not in POLICIES:
        errors.append(f"{name}: vllm_lb_policy must be one of {', '.join(POLICIES)}, got {policy!r}"
                      f"{_nearest(str(policy), POLICIES)}")
        return errors
    algorithm = settings.get("vllm_lb_balance", DEFAULTS["vllm_lb_balance"])
    if policy == "least_conn" and algorithm not in _ALGORITHMS:
        errors.append(f"{name}: vllm_lb_balance must be one of {', '.join(_ALGORITHMS)} with vllm_lb_policy "
                      f"least_conn, got {algorithm!r}; for affinity set vllm_lb_policy to session or cache_aware")
    if policy in ("session", "cache_aware"):
        factor = _int(settings, "vllm_lb_hash_balance_factor")
        if factor is None or not (factor == 0 or factor > 100):
            errors.append(f"{name}: vllm_lb_hash_balance_factor must be 0 (no load guard) or an integer above 100 "
                          f"(a percentage of the average load; HAProxy suggests 125 to 200), got "
                          f"{settings.get('vllm_lb_hash_balance_factor')!r}")
    if policy == "session":
        header = settings.get("vllm_lb_session_header", DEFAULTS["vllm_lb_session_header"])
        if not isinstance(header, str) or not _HEADER.match(header):
            errors.append(f"{name}: vllm_lb_session_header must be an HTTP header name (letters, digits, -), got "
                          f"{header!r}: set the header your clients send with a session id, like X-Session-Id")
    if policy == "cache_aware":
        size = _int(settings, "vllm_lb_prefix_bytes")
        if size is None or not 16 <= size <= PREFIX_BYTES_MAX:
            errors.append(f"{name}: vllm_lb_prefix_bytes must be an integer from 16 to {PREFIX_BYTES_MAX} (the "
                          f"bytes of the prompt that pick the replica), got {settings.get('vllm_lb_prefix_bytes')!r}")
    if _bool(settings, "vllm_lb_tls") and not _bool(settings, "vllm_lb_tls_self_signed"):
        cert = settings.get("vllm_lb_tls_certificate", "")
        if not isinstance(cert, str) or "-----BEGIN CERTIFICATE-----" not in cert:
            errors.append(f"{name}: vllm_lb_tls is on but vllm_lb_tls_certificate holds no PEM certificate: set it "
                          "to the certificate (and its chain) in PEM, the key in vllm_lb_tls_key (ansible-vault), or "
                          "set vllm_lb_tls_self_signed: true for a lab")
        if not settings.get("vllm_lb_tls_key_set"):
            errors.append(f"{name}: vllm_lb_tls is on but vllm_lb_tls_key is empty: put the certificate's private "
                          "key (PEM) in an ansible-vault file as vllm_lb_tls_key, or set vllm_lb_tls_self_signed: true "
                          "for a lab")
    return errors


def routing(settings: Mapping[str, Any]) -> dict[str, Any]:
    """HAProxy's routing directives for one balancer, with the reason.

    :returns: ``{"policy", "balance", "hash_type", "hash_balance_factor", "buffer_request", "prefix_rules",
        "reason"}``: ``balance`` is the whole ``balance`` line's argument; ``hash_type`` is ``None`` or
        ``"consistent"``; ``prefix_rules`` are the frontend's ``http-request`` lines that read the prompt's prefix.
    :raises BalancerError: bad settings (the messages of :func:`balancer_problems`)
    """
    problems = balancer_problems("vllm_lb", settings)
    if problems:
        raise BalancerError("; ".join(problems))
    policy = str(settings.get("vllm_lb_policy", DEFAULTS["vllm_lb_policy"]))
    out: dict[str, Any] = {"policy": policy, "hash_type": None, "hash_balance_factor": 0, "buffer_request": False,
                           "prefix_rules": []}
    if policy == "least_conn":
        out["balance"] = str(settings.get("vllm_lb_balance", DEFAULTS["vllm_lb_balance"]))
        out["reason"] = (f"least_conn: balance {out['balance']}, no affinity; suits long completions of unrelated "
                         "prompts (every replica sees every shared prefix)")
        return out
    factor = _int(settings, "vllm_lb_hash_balance_factor")
    out["hash_type"] = "consistent"
    out["hash_balance_factor"] = factor
    guard = (f"no replica above {factor}% of the average open requests" if factor else "no load guard (factor 0)")
    if policy == "session":
        header = str(settings.get("vllm_lb_session_header", DEFAULTS["vllm_lb_session_header"]))
        out["balance"] = f"hdr({header})"
        out["reason"] = (f"session: a client's {header} picks its replica (consistent hashing, so a replica "
                         f"leaving moves only its own sessions), {guard}; without the header round robin")
        return out
    size = _int(settings, "vllm_lb_prefix_bytes")
    out["buffer_request"] = True
    out["prefix_rules"] = [
        "set-var(txn.vf_prefix) req.body,json_query('$.messages[0].content')",
        "set-var(txn.vf_prefix) req.body,json_query('$.prompt') unless { var(txn.vf_prefix) -m found }",
    ]
    out["balance"] = f"hash var(txn.vf_prefix),bytes(0,{size})"
    out["reason"] = (f"cache_aware: the first {size} bytes of the prompt (chat: its first message) pick the replica "
                     f"that cached them (consistent hashing), {guard}; an unreadable prompt goes round robin")
    return out


def tls_names(bind_address: str, names: list[str] | None = None) -> list[str]:
    """The subject alternative names of the lab's self-signed certificate: the bind address and ``names``, each as
    ``IP:`` (an address) or ``DNS:`` (a name), without repeats; a wildcard bind address (0.0.0.0, ::) is left out."""
    import ipaddress

    out: list[str] = []
    for raw in [bind_address, *(names or [])]:
        text = str(raw).strip().strip("[]")
        if not text:
            continue
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            entry = f"DNS:{text}"
        else:
            if address.is_unspecified:
                continue
            entry = f"IP:{address}"
        if entry not in out:
            out.append(entry)
    if not out:
        raise BalancerError(f"the self-signed certificate has no name: vllm_lb_bind_address is {bind_address!r}; "
                            "list the names clients connect to in vllm_lb_tls_names")
    return out
