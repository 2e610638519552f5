"""The listening side of `agentrt serve`: uvicorn, with the connection guard (`conn_guard.py`).

One place builds the uvicorn configuration, for the CLI and for tests alike, so what the tests
check with raw sockets is what `agentrt serve` runs. From the app's `ServeConfig`:
`keepalive_timeout_s` is uvicorn's own `timeout_keep_alive`; the head size and time, the body
time and the connection cap are the guard's. `max_connections` defaults to what the process's
open-file limit allows: each client connection may hold one upstream connection, so
(limit - 64) / 2, between 16 and 4,096; `run` first raises the soft open-file limit to the hard
one (at most 65,536), as servers do.
"""

from __future__ import annotations

import logging
import resource

import uvicorn

from agentrt.serve.conn_guard import GuardLimits, guarded_protocol

log = logging.getLogger("agentrt.serve")
FD_RESERVE = 64          # listening socket, logs, the upstream's httpx client, the interpreter


def default_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, (soft - FD_RESERVE) // 2))


def raise_open_file_limit(cap: int = 1 << 16) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard one; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, want, e)
    return soft


def uvicorn_config(app, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    """uvicorn's configuration for an app made by `create_app` (its `state.config` is read)."""
    cfg = app.state.config
    limits = GuardLimits(cfg.max_header_bytes, cfg.header_timeout_s, cfg.body_timeout_s,
                         cfg.max_connections or default_max_connections())
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                          http=guarded_protocol(limits), timeout_keep_alive=cfg.keepalive_timeout_s)


def run(app, host: str, port: int, log_level: str = "info") -> None:
    raise_open_file_limit()
    uvicorn.Server(uvicorn_config(app, host, port, log_level)).run()
