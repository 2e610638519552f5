"""`python -m benchmarks.proxy --hostile`: one tenant's normal calls beside a hostile mix.

Starts the fake upstream of `proxy.py` and `agentrt serve` (pinned to CPU 0, policy cachesage,
its open-file limit set to `--nofile`, 256 by default: where the issue's probe ran out of
descriptors; every other bound at its default), then measures tenant `normal`'s calls
(`--concurrency` keep-alive connections in a closed loop, chats of workflows of 5 calls, the
upstream answering after `--delay-ms`) for `--seconds`, twice:
1. unloaded: nothing else runs;
2. hostile: beside them, from a second process (`--hostile-clients`), starting a second earlier,
   at idle CPU priority (SCHED_IDLE: on a small machine it shares the measuring client's cores,
   and at equal priority it delayed that client's own loop, which measured the machine, not
   serve; it still runs whenever the client waits, and what it sent is printed):
   - 200 connections that never send a byte and 200 that send a request head a byte every
     0.5 s, each opened again 0.1 s after the server closes it;
   - 2 clients sending requests with a 1 MiB header, one after another;
   - tenant `inventor`: 4 connections in a closed loop, every call a new agent id and a new
     workflow (never ended), with 16 KiB of tools;
   - tenant `streamer`: 4 streams lasting the whole run (an event every 0.1 s).
Prints, per run, the normal calls' count, p50, p99 and error rate (failed calls: not 200, or the
connection lost), the ratio of the p99s, the share of its core serve used during the hostile run
(CPU seconds from /proc over wall seconds: far below 100% with a large p99 means serve was kept
off its core, not busy), and what the hostile clients got.

    python -m benchmarks.proxy --hostile [--seconds 5] [--concurrency 16] [--delay-ms 14] [--nofile 256]
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter

import orjson

from benchmarks import proxy as base

IDLE, TRICKLE, HUGE, INVENTORS, STREAMS = 200, 200, 2, 4, 4


# ------------------------------------------------------------------ the hostile clients
async def _held(port: int, stop: float, trickle: bool, stats: Counter) -> None:
    """A connection that never completes a request head; opened again when the server closes it."""
    while time.perf_counter() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["connect failed"] += 1
            await asyncio.sleep(0.1)
            continue
        try:
            if trickle:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nx-slow: ")
            while time.perf_counter() < stop:
                try:
                    data = await asyncio.wait_for(reader.read(4096), 0.5 if trickle else 1.0)
                except asyncio.TimeoutError:
                    if trickle:
                        writer.write(b"a")
                    continue
                if not data:
                    stats["closed by serve"] += 1
                    break
                stats["answered " + data[9:12].decode(errors="replace")] += 1
        except OSError:
            stats["closed by serve"] += 1
        finally:
            writer.close()
        await asyncio.sleep(0.1)


async def _huge(port: int, stop: float, stats: Counter) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: " + b"h" * (1 << 20) + b"\r\n\r\n"
    while time.perf_counter() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            data = await asyncio.wait_for(reader.read(64), 10)
            stats["huge header: " + (data[9:12].decode(errors="replace") or "closed")] += 1
            writer.close()
        except (OSError, asyncio.TimeoutError):
            stats["huge header: reset"] += 1


def _inventor_call(port: int, n: int, worker: int) -> bytes:
    agent = f"inv-{worker}-{n}"
    body = orjson.dumps({"model": "m", "max_tokens": 1, "tools": [{"type": "function", "function": {
        "name": "t", "description": agent + " d" * (8 << 10)}}], "messages": [
        {"role": "system", "content": f"You are {agent}."}, {"role": "user", "content": "go"}]})
    return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nx-tenant-id: inventor\r\nx-agent-id: {agent}\r\n"
            f"x-workflow-id: {agent}\r\nx-delay-ms: 14\r\n\r\n").encode() + body


async def _inventor(port: int, stop: float, worker: int, stats: Counter) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    n = 0
    while time.perf_counter() < stop:
        try:
            ok = await base._exchange(reader, writer, _inventor_call(port, n, worker))
        except (OSError, asyncio.IncompleteReadError):
            ok = False
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        stats["inventor " + ("200" if ok else "failed")] += 1
        n += 1
    writer.close()


async def _stream(port: int, seconds: float, stats: Counter) -> None:
    body = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "long"}]})
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
           f"content-length: {len(body)}\r\nx-tenant-id: streamer\r\nx-stream-s: {seconds}\r\n\r\n").encode() + body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        ok = await base._exchange(reader, writer, req)
    except (OSError, asyncio.IncompleteReadError):
        ok = False
    stats["stream " + ("200" if ok else "failed")] += 1
    writer.close()


async def _clients(port: int, seconds: float) -> Counter:
    stats: Counter = Counter()
    stop = time.perf_counter() + seconds
    tasks = [_held(port, stop, False, stats) for _ in range(IDLE)]
    tasks += [_held(port, stop, True, stats) for _ in range(TRICKLE)]
    tasks += [_huge(port, stop, stats) for _ in range(HUGE)]
    tasks += [_inventor(port, stop, k, stats) for k in range(INVENTORS)]
    tasks += [_stream(port, seconds, stats) for _ in range(STREAMS)]
    await asyncio.gather(*tasks)
    return stats


# ------------------------------------------------------------------ orchestration
def _serve_limits(nofile: int):
    """serve's process: pinned to CPU 0, with `nofile` open files at most (soft and hard)."""
    def apply() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {0})
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return apply


def main(a) -> None:
    if a.hostile_clients:
        if hasattr(os, "SCHED_IDLE"):      # see the module docstring
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        stats = asyncio.run(_clients(a.hostile_clients, a.seconds + 2.5))
        print(json.dumps(dict(stats)))
        return
    concurrency = 16 if a.concurrency == 64 else a.concurrency     # proxy.py's default is for throughput
    ncpu = os.cpu_count() or 1
    if hasattr(os, "sched_setaffinity") and ncpu > 1:
        os.sched_setaffinity(0, set(range(1, ncpu)))
    up_port, port = base.free_port(), base.free_port()
    up = base.spawn_self("--fake-upstream", str(up_port))
    srv = hostile = None
    try:
        base.wait_port(up_port, up, "fake upstream")
        srv = subprocess.Popen([sys.executable, "-m", "agentrt.serve", "--upstream", f"http://127.0.0.1:{up_port}",
                                "--policy", "cachesage", "--port", str(port), "--log-level", "error",
                                "--kv-capacity-tokens", "1000000", "--forward-header", "x-delay-ms",
                                "--forward-header", "x-stream-s"], preexec_fn=_serve_limits(a.nofile))
        base.wait_port(port, srv, "agentrt serve")
        calm = asyncio.run(base._load(port, concurrency, a.seconds, a.delay_ms, "normal", True))
        hostile = base.spawn_self("--hostile-clients", str(port), "--seconds", str(a.seconds),
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        c0, t0 = sum(base.cpu_seconds(srv.pid)), time.perf_counter()
        rough = asyncio.run(base._load(port, concurrency, a.seconds, a.delay_ms, "normal", True))
        busy = (sum(base.cpu_seconds(srv.pid)) - c0) / (time.perf_counter() - t0)
        got = json.loads(hostile.communicate(timeout=a.seconds + 30)[0] or "{}")
    finally:
        for p in (hostile, srv, up):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
    print(f"agentrt serve (cachesage, 1 core, open-file limit {a.nofile}): tenant normal's calls, "
          f"{concurrency} keep-alive connections, upstream {a.delay_ms:g} ms, {a.seconds:g} s per run, {ncpu} CPUs")
    print(f"{'run':<9} {'calls':>7} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'error rate':>11}")
    for label, r in (("unloaded", calm), ("hostile", rough)):
        rate = r["errors"] / max(1, r["n"] + r["errors"])
        print(f"{label:<9} {r['n']:>7} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>7} {rate:>11.2%}")
    print(f"p99 hostile / unloaded: {rough['p99_ms'] / calm['p99_ms']:.2f}x; serve used {busy:.0%} of its core "
          "during the hostile run")
    print("hostile clients got: " + ", ".join(f"{k} {v}" for k, v in sorted(got.items())))
