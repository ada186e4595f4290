"""Prometheus alert rules, scrape configuration and Grafana dashboard for vllm-fleet.

Pure Python, standard library only, no I/O. Every expression uses only the series vLLM 0.32 really
exports (``vllm/v1/metrics/loggers.py``; counters carry the ``_total`` suffix) and DCGM exporter's
``DCGM_FI_DEV_GPU_UTIL`` / ``DCGM_FI_DEV_FB_USED``. Scrape jobs add a ``host`` label (the inventory
hostname) to every target so that vLLM, node exporter and DCGM series of one machine can be joined.

Why TTFT for the chat latency alert: the articles' "chat P99 < 500 ms" is a responsiveness budget. The
end-to-end latency of a chat answer grows with its length (256 output tokens at a healthy 20 ms per token
is already 5 s), so a 500 ms bound on ``vllm:e2e_request_latency_seconds`` would fire on every healthy
server. What a chat user waits for before anything appears is the time to first token, and 0.5 is one of
vLLM's TTFT histogram bucket bounds, so ``histogram_quantile`` is exact at the threshold. The end-to-end
P99 is still on the dashboard.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import DEFAULT_SERVE_PORT

VLLM_JOB = "vllm"
NODE_JOB = "node"
DCGM_JOB = "dcgm"
LB_JOB = "vllm_lb"
#: The exporters' default ports (node exporter, NVIDIA DCGM exporter); roles/monitoring/defaults uses the same.
NODE_EXPORTER_PORT = 9100
DCGM_EXPORTER_PORT = 9400

# Alert name -> runbook file (docs/runbooks/<file>).
RUNBOOKS: dict[str, str] = {
    "VllmGpuUtilisationLow": "gpu-underutilised.md",
    "VllmChatTtftP99High": "p99-too-high.md",
    "VllmThroughputSwing": "throughput-drop.md",
    "VllmEndpointDown": "endpoint-down.md",
    "VllmKvCacheSaturated": "kv-cache-saturated.md",
    "VllmPreemptionsRising": "kv-cache-saturated.md",
    "VllmWaitingQueueGrowing": "waiting-queue-growing.md",
    "VllmReplicaOutOfBalancer": "replica-not-serving.md",
}

DEFAULT_THRESHOLDS: dict[str, Any] = {
    "gpu_util_min_percent": 70,
    "gpu_util_for": "15m",
    "latency_quantile": 0.99,
    "ttft_max_seconds": 0.5,
    "latency_min_requests_per_second": 0.05,
    "latency_for": "5m",
    "throughput_swing_ratio": 0.15,
    "throughput_min_tokens_per_second": 1,
    "throughput_for": "15m",
    "endpoint_down_for": "2m",
    "kv_cache_usage_max": 0.95,
    "kv_cache_for": "5m",
    "preemption_rate_max": 0,
    "preemption_for": "5m",
    "waiting_requests_max": 10,
    "waiting_for": "5m",
    "out_of_balancer_for": "30s",
}

_BY = "host, model_name"


class MonitoringConfigError(ValueError):
    """Bad monitoring input; the message says what to change."""


def _num(value: Any, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MonitoringConfigError(f"monitoring threshold {key} must be a number, got {value!r}")
    if value < 0:
        raise MonitoringConfigError(f"monitoring threshold {key} must be >= 0, got {value!r}")
    return repr(value) if isinstance(value, float) else str(value)


def _dur(value: Any, key: str) -> str:
    text = str(value)
    units = ("ms", "s", "m", "h", "d", "w", "y")
    unit = next((u for u in units if text.endswith(u) and text[: -len(u)].isdigit()), None)
    if unit is None:
        raise MonitoringConfigError(f"monitoring duration {key} must look like 30s, 5m or 1h, got {value!r}")
    return text


def merge_thresholds(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with ``overrides``; unknown keys are an error."""
    merged = dict(DEFAULT_THRESHOLDS)
    for key, value in (overrides or {}).items():
        if key not in DEFAULT_THRESHOLDS:
            raise MonitoringConfigError(
                f"unknown monitoring threshold {key!r}; known: {', '.join(sorted(DEFAULT_THRESHOLDS))}"
            )
        merged[key] = value
    return merged


def alert_expressions(thresholds: Mapping[str, Any] | None = None) -> dict[str, str]:
    """PromQL expression per alert name."""
    t = merge_thresholds(thresholds)
    q = _num(t["latency_quantile"], "latency_quantile")
    if not 0 < float(q) < 1:
        raise MonitoringConfigError(f"latency_quantile must be between 0 and 1, got {q}")
    gen_now = f"sum by ({_BY}) (rate(vllm:generation_tokens_total[5m]))"
    gen_base = f"sum by ({_BY}) (rate(vllm:generation_tokens_total[1h] offset 5m))"
    return {
        # GPU busy (requests running on the host's vLLM) but the SMs are idle most of the time.
        "VllmGpuUtilisationLow": (
            "(avg by (host, gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m])) "
            f"< {_num(t['gpu_util_min_percent'], 'gpu_util_min_percent')})\n"
            "and on (host)\n"
            "(sum by (host) (min_over_time(vllm:num_requests_running[5m])) > 0)"
        ),
        "VllmChatTtftP99High": (
            f"(histogram_quantile({q}, sum by ({_BY}, le) "
            "(rate(vllm:time_to_first_token_seconds_bucket[5m]))) "
            f"> {_num(t['ttft_max_seconds'], 'ttft_max_seconds')})\n"
            f"and on ({_BY})\n"
            f"(sum by ({_BY}) (rate(vllm:time_to_first_token_seconds_count[5m])) "
            f">= {_num(t['latency_min_requests_per_second'], 'latency_min_requests_per_second')})"
        ),
        # Output tokens/s over the last 5 minutes against the hour before; only with real traffic.
        "VllmThroughputSwing": (
            f"(abs({gen_now} / {gen_base} - 1) "
            f"> {_num(t['throughput_swing_ratio'], 'throughput_swing_ratio')})\n"
            f"and on ({_BY})\n"
            f"({gen_base} >= {_num(t['throughput_min_tokens_per_second'], 'throughput_min_tokens_per_second')})"
        ),
        "VllmEndpointDown": f'up{{job="{VLLM_JOB}"}} == 0',
        "VllmKvCacheSaturated": (
            f"max by ({_BY}) (vllm:kv_cache_usage_perc) "
            f"> {_num(t['kv_cache_usage_max'], 'kv_cache_usage_max')}"
        ),
        "VllmPreemptionsRising": (
            f"sum by ({_BY}) (rate(vllm:num_preemptions_total[5m])) "
            f"> {_num(t['preemption_rate_max'], 'preemption_rate_max')}"
        ),
        "VllmWaitingQueueGrowing": (
            f"(sum by ({_BY}) (vllm:num_requests_waiting) "
            f"> {_num(t['waiting_requests_max'], 'waiting_requests_max')})\n"
            f"and on ({_BY})\n"
            f"(sum by ({_BY}) (deriv(vllm:num_requests_waiting[5m])) > 0)"
        ),
        # The balancer's health check fails on a replica (HAProxy's exporter, one series per state): dead, or up
        # but not serving (the generating check, vllm_lb_check_generate). Drained (DRAIN/MAINT) is not DOWN.
        "VllmReplicaOutOfBalancer": f'max by (host, proxy, server) (haproxy_server_status{{job="{LB_JOB}", state="DOWN"}}) == 1',
    }


def _annotations(name: str, runbook_base_url: str) -> dict[str, str]:
    texts = {
        "VllmGpuUtilisationLow": (
            "GPU {{ $labels.gpu }} on {{ $labels.host }} is {{ $value | humanize }}% busy while vLLM has "
            "requests running",
            "DCGM_FI_DEV_GPU_UTIL stayed below the target while requests were running: the batch is too "
            "small (max_num_seqs / max_num_batched_tokens), the client concurrency too low, or the host "
            "side (tokenizer, CPU) is the bottleneck.",
        ),
        "VllmChatTtftP99High": (
            "Time-to-first-token P99 of {{ $labels.model_name }} on {{ $labels.host }} is "
            "{{ $value | humanizeDuration }}",
            "The chat responsiveness budget is exceeded (vllm:time_to_first_token_seconds). Queueing or "
            "long prefills delay first tokens.",
        ),
        "VllmThroughputSwing": (
            "Output throughput of {{ $labels.model_name }} on {{ $labels.host }} moved "
            "{{ $value | humanizePercentage }} from the previous hour",
            "rate(vllm:generation_tokens_total) over 5m differs from its 1h baseline by more than the "
            "allowed swing.",
        ),
        "VllmEndpointDown": (
            "vLLM endpoint {{ $labels.instance }} ({{ $labels.host }}) is down",
            "Prometheus cannot scrape /metrics: the server is not running, not healthy, or not reachable.",
        ),
        "VllmKvCacheSaturated": (
            "KV cache of {{ $labels.model_name }} on {{ $labels.host }} is "
            "{{ $value | humanizePercentage }} full",
            "vllm:kv_cache_usage_perc is near 1: new requests wait and running ones get preempted.",
        ),
        "VllmPreemptionsRising": (
            "{{ $labels.model_name }} on {{ $labels.host }} preempts {{ $value | humanize }} requests/s",
            "vllm:num_preemptions_total is rising: the KV cache cannot hold the running batch, requests are "
            "recomputed.",
        ),
        "VllmWaitingQueueGrowing": (
            "{{ $value }} requests waiting on {{ $labels.host }} and the queue is growing",
            "vllm:num_requests_waiting is above the limit and still rising: offered load exceeds capacity.",
        ),
        "VllmReplicaOutOfBalancer": (
            "Replica {{ $labels.server }} is out of balancer {{ $labels.host }} (its health check fails)",
            "HAProxy marked the server DOWN: the replica is dead (connection refused), or it answers /health but "
            "produces no token (the generating check times out). The others take its traffic.",
        ),
    }
    summary, description = texts[name]
    return {
        "summary": summary,
        "description": description,
        "runbook_url": f"{runbook_base_url.rstrip('/')}/{RUNBOOKS[name]}",
    }


def alert_rules(
    thresholds: Mapping[str, Any] | None = None, runbook_base_url: str = "docs/runbooks"
) -> dict[str, Any]:
    """The Prometheus rule file (as a dict ready for YAML)."""
    t = merge_thresholds(thresholds)
    exprs = alert_expressions(t)
    durations = {
        "VllmGpuUtilisationLow": ("gpu_util_for", "warning"),
        "VllmChatTtftP99High": ("latency_for", "warning"),
        "VllmThroughputSwing": ("throughput_for", "warning"),
        "VllmEndpointDown": ("endpoint_down_for", "critical"),
        "VllmKvCacheSaturated": ("kv_cache_for", "warning"),
        "VllmPreemptionsRising": ("preemption_for", "warning"),
        "VllmWaitingQueueGrowing": ("waiting_for", "warning"),
        "VllmReplicaOutOfBalancer": ("out_of_balancer_for", "critical"),
    }
    rules = []
    for name, multiline in exprs.items():
        expr = " ".join(multiline.split("\n"))
        key, severity = durations[name]
        rules.append(
            {
                "alert": name,
                "expr": expr,
                "for": _dur(t[key], key),
                "labels": {"severity": severity, "team": "vllm-fleet"},
                "annotations": _annotations(name, runbook_base_url),
            }
        )
    return {"groups": [{"name": "vllm-fleet", "rules": rules}]}


def targets_from_inventory(
    hosts: Iterable[str],
    hostvars: Mapping[str, Any],
    port_var: str = "vllm_serve_port",
    ports_var: str = "vllm_serve_ports",
    default_port: int = DEFAULT_SERVE_PORT,
    plan_var: str = "vllm_serve_plan",
) -> list[dict[str, Any]]:
    """Per-host target descriptions (the input of :func:`scrape_configs`) from the inventory's hostvars.

    vLLM ports and address: the host's launch record (``vllm_fleet_launch``, preflight) when it has one — the
    replicas that serve the API; otherwise ``ports_var`` if set, else ``plan.parallel.replicas`` ports from ``port_var`` (or
    ``default_port``) up, as roles/vllm_serve starts them. DCGM: ``monitoring_dcgm_enabled``, else whether the
    host's gpu facts count any GPU. Node exporter: ``monitoring_node_exporter_enabled`` (default on).
    """
    result = []
    for host in hosts:
        hv = hostvars[host]
        launch = hv.get("vllm_fleet_launch") or {}
        serving = [r for r in launch.get("replicas") or [] if r.get("serves_api")]
        ports = [r["port"] for r in serving] or hv.get(ports_var)
        if not ports:
            base = int(hv.get(port_var) or default_port)
            plan = hv.get(plan_var) or {}
            replicas = int((plan.get("parallel") or {}).get("replicas") or 1)
            ports = list(range(base, base + replicas))
        dcgm = hv.get("monitoring_dcgm_enabled")
        if dcgm is None:
            facts = hv.get("ansible_facts") or {}
            gpu = facts.get("gpu") or {}
            dcgm = bool(gpu.get("gpu_count"))
        result.append(
            {
                "host": host,
                "address": (serving[0]["address"] if serving else None) or hv.get("ansible_host") or host,
                "vllm_ports": [int(p) for p in ports],
                "node_exporter": bool(hv.get("monitoring_node_exporter_enabled", True)),
                "dcgm": bool(dcgm),
            }
        )
    return result


def scrape_configs(
    targets: Iterable[Mapping[str, Any]],
    node_exporter_port: int = NODE_EXPORTER_PORT,
    dcgm_exporter_port: int = DCGM_EXPORTER_PORT,
    scrape_interval: str = "15s",
    balancers: Iterable[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Prometheus ``scrape_configs`` from per-host target descriptions (and the balancers' exporters:
    ``[{"host", "address", "port"}]``, :func:`balancer_targets`).

    Each target: ``{"host": inventory name, "address": host or IP, "vllm_ports": [int, ...],
    "node_exporter": bool, "dcgm": bool}``.
    """
    vllm: list[dict[str, Any]] = []
    node: list[dict[str, Any]] = []
    dcgm: list[dict[str, Any]] = []
    seen: set[str] = set()
    for target in targets:
        host = str(target["host"])
        address = str(target.get("address") or host)
        if host in seen:
            raise MonitoringConfigError(f"host {host!r} listed twice in the monitoring targets")
        seen.add(host)
        ports = [int(p) for p in target.get("vllm_ports", [])]
        if not ports:
            raise MonitoringConfigError(f"host {host!r} has no vLLM port; set its vLLM port variable")
        if len(set(ports)) != len(ports):
            raise MonitoringConfigError(f"host {host!r} lists a vLLM port twice: {ports}")
        vllm.append({"targets": [f"{address}:{p}" for p in ports], "labels": {"host": host}})
        if target.get("node_exporter", True):
            node.append({"targets": [f"{address}:{int(node_exporter_port)}"], "labels": {"host": host}})
        if target.get("dcgm", False):
            dcgm.append({"targets": [f"{address}:{int(dcgm_exporter_port)}"], "labels": {"host": host}})
    lb: list[dict[str, Any]] = []
    for balancer in balancers or []:
        port = int(balancer.get("port") or 0)
        if port:  # the stats port: HAProxy's exporter answers there (0: no stats, nothing to scrape)
            lb.append({"targets": [f"{balancer['address']}:{port}"], "labels": {"host": str(balancer["host"])}})
    _dur(scrape_interval, "scrape_interval")
    jobs: list[dict[str, Any]] = [
        {
            "job_name": VLLM_JOB,
            "metrics_path": "/metrics",
            "scrape_interval": scrape_interval,
            "static_configs": vllm,
        }
    ]
    if node:
        jobs.append({"job_name": NODE_JOB, "scrape_interval": scrape_interval, "static_configs": node})
    if dcgm:
        jobs.append({"job_name": DCGM_JOB, "scrape_interval": scrape_interval, "static_configs": dcgm})
    if lb:
        jobs.append({"job_name": LB_JOB, "metrics_path": "/metrics", "scrape_interval": scrape_interval,
                     "static_configs": lb})
    return jobs


def balancer_targets(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The load balancers' exporter targets (``scrape_configs``' ``balancers``): each vllm_lb host's bind address
    and stats port (HAProxy's exporter answers at /metrics there; role vllm_lb). A balancer without a stats port is
    not scraped."""
    out = []
    for host in hosts:
        hv = hostvars[host]
        out.append({"host": str(host), "address": str(hv.get("vllm_lb_bind_address") or hv.get("ansible_host") or host),
                    "port": int(hv.get("vllm_lb_stats_port") or 0)})
    return out


# --- Grafana dashboard ---------------------------------------------------------------------------

DASHBOARD_PANELS: list[tuple[str, str, str, str]] = [
    # (title, unit, PromQL, legend)
    (
        "Output tokens/s",
        "short",
        f"sum by ({_BY}) (rate(vllm:generation_tokens_total[1m]))",
        "{{host}} {{model_name}}",
    ),
    (
        "Prompt tokens/s",
        "short",
        f"sum by ({_BY}) (rate(vllm:prompt_tokens_total[1m]))",
        "{{host}} {{model_name}}",
    ),
    (
        "Time to first token P50 / P99",
        "s",
        f"histogram_quantile(0.99, sum by ({_BY}, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
        "P99 {{host}}",
    ),
    (
        "End-to-end latency P99",
        "s",
        f"histogram_quantile(0.99, sum by ({_BY}, le) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
        "P99 {{host}}",
    ),
    (
        "Inter-token latency P99",
        "s",
        f"histogram_quantile(0.99, sum by ({_BY}, le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))",
        "P99 {{host}}",
    ),
    (
        "Requests running / waiting",
        "short",
        f"sum by ({_BY}) (vllm:num_requests_running)",
        "running {{host}}",
    ),
    (
        "KV cache usage",
        "percentunit",
        f"max by ({_BY}) (vllm:kv_cache_usage_perc)",
        "{{host}} {{model_name}}",
    ),
    ("Preemptions/s", "short", f"sum by ({_BY}) (rate(vllm:num_preemptions_total[5m]))", "{{host}}"),
    (
        "Finished requests/s by reason",
        "reqps",
        "sum by (host, finished_reason) (rate(vllm:request_success_total[5m]))",
        "{{host}} {{finished_reason}}",
    ),
    (
        "Prefix cache hit rate",
        "percentunit",
        "sum by (host) (rate(vllm:prefix_cache_hits_total[5m])) / sum by (host) (rate(vllm:prefix_cache_queries_total[5m]))",
        "{{host}}",
    ),
    (
        "GPU utilisation (DCGM)",
        "percent",
        "avg by (host, gpu) (DCGM_FI_DEV_GPU_UTIL)",
        "{{host}} GPU {{gpu}}",
    ),
    (
        "GPU memory used (DCGM)",
        "decmbytes",
        "max by (host, gpu) (DCGM_FI_DEV_FB_USED)",
        "{{host}} GPU {{gpu}}",
    ),
    ("Endpoint up", "short", f'up{{job="{VLLM_JOB}"}}', "{{instance}}"),
]

# Extra targets for panels that show two series.
_EXTRA_TARGETS: dict[str, list[tuple[str, str]]] = {
    "Time to first token P50 / P99": [
        (
            f"histogram_quantile(0.5, sum by ({_BY}, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
            "P50 {{host}}",
        )
    ],
    "Requests running / waiting": [(f"sum by ({_BY}) (vllm:num_requests_waiting)", "waiting {{host}}")],
}


def dashboard(title: str = "vLLM fleet", datasource_uid: str = "prometheus") -> dict[str, Any]:
    """Grafana dashboard model (schema 39) with one time-series panel per entry of DASHBOARD_PANELS."""
    panels: list[dict[str, Any]] = []
    for index, (panel_title, unit, expr, legend) in enumerate(DASHBOARD_PANELS):
        queries = [(expr, legend), *_EXTRA_TARGETS.get(panel_title, [])]
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": panel_title,
                "datasource": {"type": "prometheus", "uid": datasource_uid},
                "gridPos": {"h": 8, "w": 12, "x": (index % 2) * 12, "y": (index // 2) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(ord("A") + n),
                        "datasource": {"type": "prometheus", "uid": datasource_uid},
                        "expr": q,
                        "legendFormat": lg,
                    }
                    for n, (q, lg) in enumerate(queries)
                ],
            }
        )
    return {
        "uid": "vllm-fleet",
        "title": title,
        "tags": ["vllm", "vllm-fleet"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "panels": panels,
    }


def dashboard_queries(model: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression in a dashboard model."""
    return [str(t["expr"]) for p in model.get("panels", []) for t in p.get("targets", [])]


def series_names(expr: str) -> set[str]:
    """Metric names an expression references: ``vllm:*``, ``DCGM_*``, ``haproxy_*`` and ``up``."""
    bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    tokens = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare)
    return {tok for tok in tokens if ":" in tok or tok.startswith(("DCGM_", "haproxy_")) or tok == "up"}


def exporter_listen(address: str, port: int) -> dict[str, str]:
    """An exporter's listen address (node exporter, DCGM exporter) against the port Prometheus scrapes:
    ``problem`` is "" when ``address`` is ``[HOST]:PORT`` (an IPv6 host in brackets, an empty host for every interface)
    with that port, else what is wrong; ``local_url`` is where the host itself reads ``/metrics`` (127.0.0.1 for
    an empty, ``0.0.0.0`` or ``[::]`` host)."""
    if not re.fullmatch(r"([^:\s\[\]]*|\[[0-9A-Fa-f:.]*\]):[0-9]{1,5}", address):
        problem = "must be [HOST]:PORT"
    elif address.rsplit(":", 1)[1] != str(port):
        problem = f"must end with the port Prometheus scrapes, {port}"
    else:
        problem = ""
    local = re.sub(r"^(0\.0\.0\.0|\[::\])?:", "127.0.0.1:", address)
    return {"problem": problem, "local_url": f"http://{local}/metrics"}
