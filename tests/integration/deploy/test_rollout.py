"""Roll out and roll back real vLLM containers behind a real HAProxy, under load, on the fleet lab.

The lab (conftest.py: the real site.yml, three hosts vf-lab-a/b/c on 127.0.0.1:18310-18312, HAProxy on
127.0.0.1:18300, the API key from ansible-vault) is converged and checked by test_fleet_lab.py first. A load
generator (stdlib http.client, threads, with the key) sends completions through HAProxy while:

1. a rolling update changes a flag the way a user does — vllm_fleet_engine_args, through preflight and the
   planner — on every host: zero failed requests;
2. a flag the planner accepts but vLLM cannot start with (a tokenizer path that does not exist) stops at the
   canary, which is rolled back; the fleet keeps serving: zero failed requests.

A watcher polls HAProxy's stats (CSV) twice a second through both: every server is taken out of rotation
exactly once by the rollout (DRAIN/MAINT; a health check that fails for a few seconds on the busy machine is
reported, not counted), never more at once than the rollout batch, at least one stays UP throughout, all are UP at
the end and each takes new sessions after it came back; requests keep completing while servers are out. The
load balancer retries and redispatches, so "0 failed" alone would not show that the drain works: these do.

Starts of vLLM (eager mode, ~1.5-2.5 min each on the shared 2-core test bed): 3 (update) + 1 failed at once
(broken flag) + 1 restored (the canary's previous container). Figures go to artifacts/deploy/rollout.json;
the README's rollout figures are this module's printed lines.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import threading
import time
import urllib.request
from typing import Any

import pytest

from .._helpers import completion
from .conftest import (
    API_KEY,
    ENGINE_ARGS,
    HOSTS,
    ROOT,
    SERVED,
    STATS_PORT,
    Lab,
    containers,
    inspect,
    lb_connection,
    ok,
    recap,
)

pytestmark = pytest.mark.integration

ARTIFACTS = ROOT / "artifacts" / "deploy"
CANARY = next(iter(HOSTS))


class Load:
    """Steady completions through the load balancer: threads, stdlib http.client, one connection per request."""

    # Three clients, each pausing 0.4 s between requests (about 5 requests a second in all, well over 1,000 in a
    # rolling update): steady traffic through every server, still light enough that the replicas serving it leave
    # this 2-core machine's CPU to the one that starts (a saturating load starves a starting replica for minutes;
    # the servers busy-poll between requests at any rate above about one a second, so this rate adds little).
    def __init__(self, workers: int = 3, pause_s: float = 0.4) -> None:
        self.workers, self.pause_s = workers, pause_s
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.done_at: list[float] = []  # monotonic completion time of each successful request
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _worker in range(workers)]

    def _one(self) -> None:
        body = json.dumps({"model": SERVED, "prompt": "The fleet", "max_tokens": 8, "temperature": 0})
        start = time.monotonic()
        try:
            conn = lb_connection()  # HTTPS, the balancer's certificate verified
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
                self.done_at.append(time.monotonic())

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

    def sent(self) -> int:
        with self.lock:
            return len(self.latencies) + len(self.failures)

    def until_sent(self, count: int, timeout_s: float = 90.0) -> None:
        """Keep the traffic on until ``count`` requests were sent (a rollout that ran fast on an idle machine still
        leaves a sample of that size behind its zero-failure figure), at most ``timeout_s`` more."""
        deadline = time.monotonic() + timeout_s
        while self.sent() < count and time.monotonic() < deadline:
            time.sleep(0.5)

    def report(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None
        return {"sent": len(lat) + len(self.failures), "failed": len(self.failures),
                "p50_s": lat[len(lat) // 2] if lat else None, "p99_s": p99, "max_s": lat[-1] if lat else None,
                "failures": self.failures[:20]}


class LbWatch:
    """HAProxy's stats page polled twice a second: each server's status and total sessions over time."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[str, tuple[str, int]]]] = []  # (t, {server: (status, stot)})
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def rows() -> dict[str, dict[str, str]]:
        """HAProxy's stats page (CSV): each lab server's row (status, stot, scur, ...)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{STATS_PORT}/stats;csv", timeout=5) as response:
            text = response.read().decode()
        return {row["svname"]: row for row in csv.DictReader(io.StringIO(text.lstrip("# "))) if row["svname"] in HOSTS}

    @classmethod
    def read(cls) -> dict[str, tuple[str, int]]:
        return {name: (row["status"], int(row["stot"] or 0)) for name, row in cls.rows().items()}

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.samples.append((time.monotonic(), self.read()))
            except Exception as exc:  # a stats page that stops answering is a finding, not a crash
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.stop_event.wait(self.interval_s)

    def __enter__(self) -> LbWatch:
        self.samples.append((time.monotonic(), self.read()))
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)
        self.samples.append((time.monotonic(), self.read()))

    @staticmethod
    def is_up(status: str) -> bool:
        return status.startswith("UP")  # "UP", or "UP 1/3" (still serving, a check failed)

    @staticmethod
    def is_set_out(status: str) -> bool:
        return status.startswith(("DRAIN", "MAINT"))  # taken out by the rollout (HAProxy's runtime API)

    @classmethod
    def is_out(cls, status: str, set_out: bool) -> bool:
        """Out of rotation: taken out by the rollout (``set_out``), or for any reason (a failed health check too)."""
        return cls.is_set_out(status) if set_out else not cls.is_up(status)

    def out_periods(self, set_out: bool = False) -> dict[str, list[tuple[float, float]]]:
        """Per server, the [start, end) times it was out of rotation (DRAIN, MAINT, DOWN, NOLB...); with
        ``set_out``, only the times the rollout itself took it out (DRAIN, MAINT), not a failed health check."""
        periods: dict[str, list[tuple[float, float]]] = {name: [] for name in HOSTS}
        since: dict[str, float] = {}
        for t, servers in self.samples:
            for name in HOSTS:
                up = not self.is_out(servers.get(name, ("MISSING", 0))[0], set_out)
                if not up and name not in since:
                    since[name] = t
                elif up and name in since:
                    periods[name].append((since.pop(name), t))
        end = self.samples[-1][0]
        for name, start in since.items():
            periods[name].append((start, end))
        return periods

    def most_out_at_once(self, set_out: bool = True) -> int:
        """The most servers out of rotation in one sample: taken out by the rollout (DRAIN, MAINT), or with
        ``set_out=False`` out for any reason (a failed health check too)."""
        return max(sum(self.is_out(s.get(n, ("MISSING", 0))[0], set_out) for n in HOSTS) for _t, s in self.samples)

    def check_blips(self, set_out: dict[str, list[tuple[float, float]]]) -> dict[str, list[float]]:
        """Out-of-rotation periods outside the rollout's own (a health check that failed on a busy machine: DOWN),
        per server, in seconds."""
        blips: dict[str, list[float]] = {}
        for name, periods in self.out_periods().items():
            for start, end in periods:
                if not any(a <= end and start <= b for a, b in set_out[name]):
                    blips.setdefault(name, []).append(round(end - start, 1))
        return blips

    def summary(self) -> dict[str, Any]:
        periods = self.out_periods()
        statuses = {n: sorted({s.get(n, ("MISSING", 0))[0] for _t, s in self.samples}) for n in HOSTS}
        out_s = {n: [round(b - a, 1) for a, b in p] for n, p in periods.items()}
        set_out = self.out_periods(set_out=True)
        return {"samples": len(self.samples), "out_periods_s": out_s,
                "set_out_periods_s": {n: [round(b - a, 1) for a, b in p] for n, p in set_out.items()},
                "check_blips_s": self.check_blips(set_out),
                "statuses_seen": statuses, "most_out_at_once": self.most_out_at_once(),
                "most_out_at_once_any_reason": self.most_out_at_once(set_out=False),
                "stats_errors": self.errors[:5]}


def _completed_while_out(load: Load, periods: dict[str, list[tuple[float, float]]]) -> int:
    spans = [span for spans in periods.values() for span in spans]
    return sum(any(a <= t < b for a, b in spans) for t in load.done_at)


def _direct_completion(port: int, max_tokens: int = 8, timeout: float = 120) -> dict[str, Any]:
    """A completion straight to one replica (not through the load balancer), with the API key."""
    return completion(port, SERVED, api_key=API_KEY, max_tokens=max_tokens, timeout=timeout, ignore_eos=True)


def _record(name: str, figures: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "rollout.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = figures
    path.write_text(json.dumps(data, indent=2))
    print(f"\n[deploy] {name}: {json.dumps(figures)}")


def _engine_args(**pins: Any) -> str:
    return json.dumps({"vllm_fleet_engine_args": dict(ENGINE_ARGS, **pins)})


def _docker_health(name: str, wait_s: float = 120.0) -> str:
    """Docker's health status once it settles: the gate has passed, but Docker's own check (a Python process every
    5 s, three failures in a row) can read "unhealthy" for a while when the 2-core machine is saturated; a replica
    that stays unhealthy for two minutes fails."""
    deadline = time.monotonic() + wait_s
    while True:
        status: str = inspect(name)["State"]["Health"]["Status"]
        if status == "healthy" or time.monotonic() > deadline:
            return status
        time.sleep(5)


def test_rolling_update_drops_no_request(lab: Lab) -> None:
    before = {name: inspect(name)["Id"] for name in HOSTS}
    planned = lab.records()[CANARY]["launch"]["replicas"][0]["engine_args"]["max-num-seqs"]
    assert lab.engine_config(CANARY)["max-num-seqs"] == planned != 4
    start = time.monotonic()
    with LbWatch() as watch, Load() as load:
        result = lab.play("-e", _engine_args(max_num_seqs=4))
        time.sleep(10)  # the last batch back in rotation takes new sessions
        load.until_sent(1000)
    elapsed = time.monotonic() - start
    figures = load.report()
    periods = watch.out_periods(set_out=True)
    while_out = _completed_while_out(load, periods)
    _record("rolling_update", dict(figures, seconds=round(elapsed), completed_while_out=while_out,
                                   req_per_s=round(figures["sent"] / elapsed, 2), lb=watch.summary()))
    ok(result)
    records = lab.records()
    after = {name: inspect(name)["Id"] for name in HOSTS}
    for name in HOSTS:
        assert after[name] != before[name], f"{name} was not recreated"
        assert records[name]["launch"]["replicas"][0]["engine_args"]["max-num-seqs"] == 4
        assert lab.engine_config(name) == records[name]["launch"]["replicas"][0]["engine_args"]
        assert _docker_health(name) == "healthy"
    assert containers() == sorted(HOSTS), "a -prev container was left behind"
    # What the load balancer saw: each server taken out of rotation by the rollout exactly once (drained, replaced,
    # put back), never more at once than the rollout's batch (the canary alone, then b and c: two cores, see
    # conftest), always one serving, all UP at the end, and each took new sessions after it came back. A health
    # check that fails for a few seconds while a neighbour starts on the busy 2-core machine (DOWN, not the
    # rollout's DRAIN/MAINT; seen in CI with 1 s checks) is reported, and must stay short.
    assert not watch.errors, watch.errors
    assert all(len(periods[name]) == 1 for name in HOSTS), watch.summary()
    assert all(s <= 15 for blips in watch.check_blips(periods).values() for s in blips), watch.summary()
    assert 1 <= watch.most_out_at_once() <= 2, watch.summary()
    canary_back = periods[CANARY][0][1]
    assert all(periods[name][0][0] >= canary_back for name in HOSTS if name != CANARY), "went past the canary early"
    final = watch.samples[-1][1]
    assert all(watch.is_up(final[name][0]) for name in HOSTS), final
    for name in HOSTS:
        back = periods[name][0][1]
        stot_back = next(servers[name][1] for t, servers in watch.samples if t >= back)
        assert final[name][1] > stot_back, f"{name} took no new session after it came back: {watch.summary()}"
    assert while_out >= 50, f"only {while_out} requests completed while a server was out"
    assert figures["sent"] >= 1000, figures
    assert figures["failed"] == 0, figures
    assert figures["p99_s"] is not None and figures["p99_s"] < 10, figures


def test_broken_flag_stops_at_the_canary_and_rolls_back(lab: Lab) -> None:
    before = {name: inspect(name) for name in HOSTS}
    start = time.monotonic()
    with LbWatch() as watch, Load() as load:
        # The planner accepts any tokenizer path (it is the host's business); vLLM exits at start.
        result = lab.play("-e", _engine_args(max_num_seqs=4, tokenizer="/no/such/tokenizer"))
        time.sleep(2)
    elapsed = time.monotonic() - start
    figures = load.report()
    periods = watch.out_periods(set_out=True)
    _record("rollback", dict(figures, seconds=round(elapsed), completed_while_out=_completed_while_out(load, periods),
                             req_per_s=round(figures["sent"] / elapsed, 2), lb=watch.summary()))
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
    assert _docker_health(CANARY) == "healthy"
    assert "tokenizer" not in lab.engine_config(CANARY)
    for other in list(HOSTS)[1:]:
        assert inspect(other)["State"]["StartedAt"] == before[other]["State"]["StartedAt"]
    assert containers() == sorted(HOSTS)
    # Only the canary was taken out of rotation, once, and it is back (a failed health check of a few seconds on
    # the busy machine is reported, not counted); the restored replica answers on its own port.
    assert not watch.errors, watch.errors
    assert len(periods[CANARY]) == 1 and all(not periods[n] for n in HOSTS if n != CANARY), watch.summary()
    assert all(s <= 15 for blips in watch.check_blips(periods).values() for s in blips), watch.summary()
    assert all(watch.is_up(watch.samples[-1][1][name][0]) for name in HOSTS), watch.summary()
    assert LbWatch.is_up(LbWatch.read()[CANARY][0])
    assert _direct_completion(HOSTS[CANARY])["choices"], "the restored replica does not answer"
    assert figures["sent"] >= 100, figures
    assert figures["failed"] == 0, figures


def test_a_stopping_replica_finishes_the_requests_inside_it(lab: Lab) -> None:
    """vLLM's --shutdown-timeout (planned) with the container's stop timeout (the launch record): a request in
    flight when the replica stops, the way the role stops it (docker stop --time), completes. Runs last: it
    stops the lab's last replica for good."""
    name = list(HOSTS)[-1]
    launch = lab.records()[name]["launch"]
    shutdown = lab.engine_config(name)["shutdown-timeout"]
    assert shutdown == launch["replicas"][0]["engine_args"]["shutdown-timeout"] > 0
    assert launch["stop_timeout_s"] > shutdown
    assert inspect(name)["Config"].get("StopTimeout") == launch["stop_timeout_s"]
    answer: dict[str, Any] = {}
    tokens = 1500

    def long_request() -> None:
        answer.update(_direct_completion(HOSTS[name], max_tokens=tokens, timeout=300))
        answer["done_at"] = time.monotonic()

    client = threading.Thread(target=long_request)
    client.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the request is inside the engine
        with urllib.request.urlopen(f"http://127.0.0.1:{HOSTS[name]}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        if any(line.startswith("vllm:num_requests_running") and not line.rstrip().endswith(" 0.0")
               for line in metrics.splitlines()):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the long request never ran")
    stop_at = time.monotonic()
    stopped = subprocess.run(["docker", "stop", "--time", str(launch["stop_timeout_s"]), name],
                             capture_output=True, text=True, check=False, timeout=launch["stop_timeout_s"] + 30)
    client.join(timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    logs = subprocess.run(["docker", "logs", "--tail", "200", name], capture_output=True, text=True, check=False)
    text = logs.stdout + logs.stderr
    assert "mode=drain" in text, text[-3000:]
    assert answer.get("choices") and answer["usage"]["completion_tokens"] == tokens, answer
    assert answer["done_at"] > stop_at, "the request ended before the stop: it proves nothing (make it longer)"
    assert inspect(name)["State"]["ExitCode"] != 137, "docker killed vLLM before the request finished"
    print(f"\n[deploy] graceful stop: a {tokens}-token request in flight at the stop completed "
          f"{answer['done_at'] - stop_at:.1f} s after it; vLLM logged drain mode (--shutdown-timeout {shutdown}, "
          f"docker stop --time {launch['stop_timeout_s']})")
