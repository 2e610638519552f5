"""Proxy overhead of `agentrt serve`: requests/s and added latency against a fast fake upstream.

Starts, on 127.0.0.1:
- a fake OpenAI upstream (raw asyncio, its own process, not pinned: pinned to the load
  generator's core it starves behind it and the figures measure that, not serve) that answers
  every POST with a small chat completion carrying `usage`, after `X-Delay-Ms` milliseconds;
- `agentrt serve` (`python -m agentrt.serve`, its own process pinned to CPU 0: at most one core)
  in front of it, with the policy given (default cachesage, so the runtime and its act loop run);
and drives both from this process (pinned off CPU 0) with a raw keep-alive HTTP/1.1
client: `--concurrency` connections, each sending its next request when the last one's answer is
complete (closed loop). Requests are chats with a 1,000-character system prompt per agent (4
agents), a user message, `X-Agent-Id`, `X-Workflow-Id`: each connection runs workflows of 5
calls one after the other, the 5th with `X-Workflow-End: true`.

Measured, each for `--seconds`:
1. throughput: upstream delay 0, direct and through serve: requests/s (serve's figure is what
   one core of serve sustains; its latencies there are queueing at saturation);
2. added latency: upstream delay `--delay-ms` (14), direct and through serve, at the same
   concurrency: p50 / p99 per request, and their difference.
For serve it also prints its CPU time per request (user and system, from /proc).

    python -m benchmarks.proxy [--seconds 5] [--concurrency 64] [--delay-ms 14] [--policy cachesage]

`--hostile` measures instead normal calls of one tenant beside a hostile mix of other clients
(slow clients, huge headers, a tenant inventing agent ids, another streaming): see
`proxy_hostile.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

from benchmarks.fake_upstream import run_upstream

REPO = Path(__file__).resolve().parents[1]


def spawn_self(*args: str, **kw) -> subprocess.Popen:
    """This script (`python -m benchmarks.proxy ARGS`) in its own process, run from the repository root."""
    return subprocess.Popen([sys.executable, "-m", "benchmarks.proxy", *args], cwd=REPO, **kw)


# ------------------------------------------------------------------ the load generator
def _bodies() -> list[bytes]:
    """20 request bodies: 4 agents x 5 steps (the workflow id travels in a header)."""
    out = []
    for i in range(20):
        agent = f"agent-{i % 4}"
        out.append(orjson.dumps({"model": "m", "max_tokens": 1, "messages": [
            {"role": "system", "content": f"You are {agent}. " + "Follow the plan carefully. " * 38},
            {"role": "user", "content": f"step {i // 4} of the task"}]}))
    return out


def _request(bodies: list[bytes], port: int, worker: int, n: int, delay_ms: float, tenant: str = "") -> bytes:
    """The n-th request of one connection: workflows of 5 calls, one after the other."""
    body = bodies[n % len(bodies)]
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
            + (f"x-tenant-id: {tenant}\r\n" if tenant else "") +
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"x-agent-id: agent-{n % 4}\r\nx-workflow-id: wf-{worker}-{n // 5}\r\n"
            f"x-workflow-end: {'true' if n % 5 == 4 else 'false'}\r\nx-delay-ms: {delay_ms}\r\n\r\n")
    return head.encode() + body


async def _worker(port: int, bodies: list[bytes], stop: float, lat: list[float], k: int,
                  delay_ms: float, errors: list | None = None, tenant: str = "") -> None:
    """A closed loop of calls on one keep-alive connection. With `errors`, a failed call (not
    200, or the connection lost) is recorded there and the loop goes on (on a new connection);
    without, it raises."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    n = 0
    try:
        while time.perf_counter() < stop:
            req = _request(bodies, port, k, n, delay_ms, tenant)
            t0 = time.perf_counter()
            try:
                ok = await _exchange(reader, writer, req)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                if errors is None:
                    raise
                ok = False
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if not ok:
                if errors is None:
                    raise RuntimeError("a call failed")
                errors.append(time.perf_counter() - t0)
            else:
                lat.append(time.perf_counter() - t0)
            n += 1
    finally:
        writer.close()


async def _exchange(reader, writer, req: bytes) -> bool:
    """Send one request, read its whole answer; whether it was a 200."""
    writer.write(req)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    chunked = False
    for line in head.split(b"\r\n"):
        low = line.lower()
        if low.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
        elif low.startswith(b"transfer-encoding:") and b"chunked" in low:
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await reader.readexactly(length)
    return head.startswith(b"HTTP/1.1 200")


_RUN = [0]


async def _load(port: int, concurrency: int, seconds: float, delay_ms: float, tenant: str = "",
                count_errors: bool = False) -> dict:
    """A half-second warm-up, then `seconds` of closed-loop calls; with `count_errors` failed
    calls are counted (`errors`) instead of stopping the run."""
    bodies = _bodies()
    errors: list | None = [] if count_errors else None
    warm: list[float] = []
    _RUN[0] += 1
    base = _RUN[0] * 10_000                 # fresh workflow ids for every run
    await asyncio.gather(*(_worker(port, bodies, time.perf_counter() + 0.5, warm, base + k, delay_ms,
                                   errors, tenant) for k in range(concurrency)))
    lat: list[float] = []
    if errors is not None:
        errors.clear()
    t0 = time.perf_counter()
    await asyncio.gather(*(_worker(port, bodies, t0 + seconds, lat, base + 5000 + k, delay_ms, errors, tenant)
                           for k in range(concurrency)))
    wall = time.perf_counter() - t0
    lat.sort()
    q = statistics.quantiles(lat, n=100)
    return {"n": len(lat), "rps": len(lat) / wall, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
            "errors": len(errors or ())}


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, from /proc (0, 0 where there is none)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tick, int(f[12]) / tick


def load(port: int, concurrency: int, seconds: float, delay_ms: float, pid: int | None = None) -> dict:
    c0 = cpu_seconds(pid) if pid else (0.0, 0.0)
    out = asyncio.run(_load(port, concurrency, seconds, delay_ms))
    if pid:
        c1 = cpu_seconds(pid)
        n = out["n"] * (seconds + 0.5) / seconds          # the warm-up half second counts too
        out["user_us"], out["sys_us"] = ((c1[i] - c0[i]) / n * 1e6 for i in (0, 1))
    return out


# ------------------------------------------------------------------ orchestration
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port}")


def pinned(cpu: int) -> dict:
    ncpu = os.cpu_count() or 1
    return {"preexec_fn": (lambda: os.sched_setaffinity(0, {cpu % ncpu}))} if hasattr(os, "sched_setaffinity") else {}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.proxy", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=14.0)
    ap.add_argument("--policy", default="cachesage")
    ap.add_argument("--hostile", action="store_true", help="normal calls beside the hostile mix (proxy_hostile.py)")
    ap.add_argument("--nofile", type=int, default=256, help="--hostile: serve's open-file limit")
    ap.add_argument("--fake-upstream", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--hostile-clients", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fake_upstream:
        return run_upstream(a.fake_upstream)
    if a.hostile or a.hostile_clients:
        from benchmarks import proxy_hostile
        return proxy_hostile.main(a)
    ncpu = os.cpu_count() or 1
    if hasattr(os, "sched_setaffinity") and ncpu > 1:
        os.sched_setaffinity(0, set(range(1, ncpu)))       # the load generator: off serve's core
    up_port, serve_port = free_port(), free_port()
    up = spawn_self("--fake-upstream", str(up_port))
    srv = None
    try:
        wait_port(up_port, up, "fake upstream")
        srv = subprocess.Popen([sys.executable, "-m", "agentrt.serve", "--upstream", f"http://127.0.0.1:{up_port}",
                                "--policy", a.policy, "--port", str(serve_port), "--log-level", "warning",
                                "--kv-capacity-tokens", "1000000", "--forward-header", "x-delay-ms"],
                               **pinned(0))
        wait_port(serve_port, srv, "agentrt serve")
        rows = []
        for label, delay in (("throughput", 0.0), ("latency", a.delay_ms)):
            direct = load(up_port, a.concurrency, a.seconds, delay)
            via = load(serve_port, a.concurrency, a.seconds, delay, srv.pid)
            rows.append((label, delay, direct, via))
        print(f"agentrt serve (policy {a.policy}, 1 core) vs. the fake upstream directly; "
              f"{a.concurrency} concurrent keep-alive connections, {a.seconds:g} s per run, {ncpu} CPUs")
        print(f"{'run':<11} {'upstream':>9} {'path':<7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}"
              f" {'serve CPU/req: user':>20} {'sys':>7}")
        for label, delay, direct, via in rows:
            for path, r in (("direct", direct), ("serve", via)):
                cpu = f" {r['user_us']:>17.0f} us {r['sys_us']:>4.0f} us" if "user_us" in r else ""
                print(f"{label:<11} {delay:>7g}ms {path:<7} {r['rps']:>8.0f} {r['p50_ms']:>8.2f} "
                      f"{r['p99_ms']:>8.2f}{cpu}")
            print(f"{'':<11} {'':>9} {'added':<7} {'':>8} {via['p50_ms'] - direct['p50_ms']:>+8.2f} "
                  f"{via['p99_ms'] - direct['p99_ms']:>+8.2f}")
    finally:
        for p in (srv, up):
            if p is not None:
                p.terminate()
                p.wait(timeout=10)


if __name__ == "__main__":
    main()
