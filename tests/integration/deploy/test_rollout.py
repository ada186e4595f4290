"""Roll out and roll back real vLLM containers behind a real HAProxy, under load, on the fleet lab.

The lab (conftest.py: the real site.yml, three hosts vf-lab-a/b/c on 127.0.0.1:18310-18312, HAProxy on
127.0.0.1:18300, the API key from ansible-vault) is converged and checked by test_fleet_lab.py first. A load
generator (stdlib http.client, threads, with the key) sends completions through HAProxy while:

1. a rolling update changes a flag the way a user does — vllm_fleet_engine_args, through preflight and the
   planner — on every host: zero failed requests;
2. a flag the planner accepts but vLLM cannot start with (a tokenizer path that does not exist) stops at the
   canary, which is rolled back; the fleet keeps serving: zero failed requests.

Starts of vLLM (eager mode, ~1.5-2.5 min each on the shared 2-core test bed): 3 (update) + 1 failed at once
(broken flag) + 1 restored (the canary's previous container). Figures go to artifacts/deploy/rollout.json.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

import pytest

from .conftest import API_KEY, ENGINE_ARGS, HOSTS, LB_PORT, ROOT, SERVED, Lab, containers, inspect, ok, recap

pytestmark = pytest.mark.integration

ARTIFACTS = ROOT / "artifacts" / "deploy"
CANARY = next(iter(HOSTS))


class Load:
    """Steady completions through the load balancer: threads, stdlib http.client, one connection per request."""

    # One client, about a request a second: steady traffic through every server, light enough that the
    # replicas serving it leave this 2-core machine's CPU to the one that starts (a vLLM CPU worker busy-polls
    # for a second after each request; a saturating load starves a starting replica for many minutes).
    def __init__(self, workers: int = 1, pause_s: float = 1.0) -> None:
        self.workers, self.pause_s = workers, pause_s
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _worker in range(workers)]

    def _one(self) -> None:
        body = json.dumps({"model": SERVED, "prompt": "The fleet", "max_tokens": 8, "temperature": 0})
        start = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", LB_PORT, timeout=120)
            conn.request("POST", "/v1/completions", body,
                         {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            ok = resp.status == 200 and json.loads(data).get("choices")
            error = "" if ok else f"HTTP {resp.status}: {data[:200]!r}"
        except Exception as exc:  # every client-visible error counts
            error = f"{type(exc).__name__}: {exc}"
        with self.lock:
            if error:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {error}")
            else:
                self.latencies.append(time.monotonic() - start)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            self._one()
            time.sleep(self.pause_s)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=150)

    def report(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None
        return {"sent": len(lat) + len(self.failures), "failed": len(self.failures),
                "p50_s": lat[len(lat) // 2] if lat else None, "p99_s": p99, "max_s": lat[-1] if lat else None,
                "failures": self.failures[:20]}


def _record(name: str, figures: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "rollout.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = figures
    path.write_text(json.dumps(data, indent=2))
    print(f"\n[deploy] {name}: {json.dumps(figures)}")


def _engine_args(**pins: Any) -> str:
    return json.dumps({"vllm_fleet_engine_args": dict(ENGINE_ARGS, **pins)})


def test_rolling_update_drops_no_request(lab: Lab) -> None:
    before = {name: inspect(name)["Id"] for name in HOSTS}
    planned = lab.records()[CANARY]["launch"]["replicas"][0]["engine_args"]["max-num-seqs"]
    assert lab.engine_config(CANARY)["max-num-seqs"] == planned != 4
    start = time.monotonic()
    with Load() as load:
        result = lab.play("-e", _engine_args(max_num_seqs=4))
        time.sleep(2)
    elapsed = time.monotonic() - start
    figures = load.report()
    _record("rolling_update", dict(figures, seconds=round(elapsed)))
    ok(result)
    records = lab.records()
    after = {name: inspect(name)["Id"] for name in HOSTS}
    for name in HOSTS:
        assert after[name] != before[name], f"{name} was not recreated"
        assert records[name]["launch"]["replicas"][0]["engine_args"]["max-num-seqs"] == 4
        assert lab.engine_config(name) == records[name]["launch"]["replicas"][0]["engine_args"]
        assert inspect(name)["State"]["Health"]["Status"] == "healthy"
    assert containers() == sorted(HOSTS), "a -prev container was left behind"
    assert figures["sent"] >= 20, figures
    assert figures["failed"] == 0, figures


def test_broken_flag_stops_at_the_canary_and_rolls_back(lab: Lab) -> None:
    before = {name: inspect(name) for name in HOSTS}
    start = time.monotonic()
    with Load() as load:
        # The planner accepts any tokenizer path (it is the host's business); vLLM exits at start.
        result = lab.play("-e", _engine_args(max_num_seqs=4, tokenizer="/no/such/tokenizer"))
        time.sleep(2)
    elapsed = time.monotonic() - start
    figures = load.report()
    _record("rollback", dict(figures, seconds=round(elapsed)))
    assert result.returncode != 0, result.stdout[-3000:]
    out = result.stdout
    assert f"ROLLED BACK {CANARY}" in out, out[-6000:]
    assert "/no/such/tokenizer" in out, "the container log lines are not in the failure message"
    counts = recap(out)
    assert counts[CANARY]["failed"] == 1
    for other in list(HOSTS)[1:]:
        assert other not in counts or counts[other]["changed"] == 0, "the rollout went past the canary"
    # The canary runs its previous container again (same id, same engine config); the others were not touched.
    assert inspect(CANARY)["Id"] == before[CANARY]["Id"]
    assert inspect(CANARY)["State"]["Health"]["Status"] == "healthy"
    assert "tokenizer" not in lab.engine_config(CANARY)
    for other in list(HOSTS)[1:]:
        assert inspect(other)["State"]["StartedAt"] == before[other]["State"]["StartedAt"]
    assert containers() == sorted(HOSTS)
    assert figures["sent"] >= 20, figures
    assert figures["failed"] == 0, figures
