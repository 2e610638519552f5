"""A subscriber to vLLM's KV event publishers (`--kv-events-config`, publisher "zmq").

Model
- Each replica's vLLM binds a ZMQ PUB socket (an `ipc://` path on one node, `tcp://*:PORT`
  across nodes) and publishes multipart messages `[topic, seq (8 bytes, big-endian), payload]`,
  the payload a msgpack `EventBatch` `[ts, events, data_parallel_rank]` whose events are maps
  tagged by `type` (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`). This is vLLM's wire
  format; it is decoded generically here so the router process does not import vLLM.
- One daemon thread owns every SUB socket (ZMQ sockets are not thread-safe): `subscribe` and
  `unsubscribe` only queue commands for it, and decoded batches go to a queue that the router
  drains on its own event loop (`drain`). The thread polls every `poll_ms` and stops at `close`.
- A jump in a publisher's sequence numbers means lost batches (the publisher's high-water mark
  overflowed or the subscriber joined late): it is counted per replica in `gaps`; the mirror may
  then hold blocks vLLM evicted until they are stored or removed again. vLLM's replay socket is
  not used.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Hashable

log = logging.getLogger(__name__)


def decode_batch(payload: bytes) -> list[dict]:
    """The events of one published `EventBatch` payload."""
    try:
        import msgspec
        batch = msgspec.msgpack.decode(payload)
    except ImportError:             # vLLM depends on msgspec; Ray on msgpack
        import msgpack
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    events = batch[1] if isinstance(batch, (list, tuple)) and len(batch) > 1 else []
    return [e for e in events if isinstance(e, dict)]


class KVEventListener:
    def __init__(self, poll_ms: int = 50) -> None:
        self.poll_ms = poll_ms
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self.gaps: dict[Hashable, int] = {}
        self.received = 0
        self._thread = threading.Thread(target=self._run, name="agentrt-kv-events", daemon=True)
        self._thread.start()

    def subscribe(self, key: Hashable, endpoint: str, topic: str = "") -> None:
        self._commands.put(("sub", key, endpoint, topic))

    def unsubscribe(self, key: Hashable) -> None:
        self._commands.put(("unsub", key, None, None))

    def drain(self) -> list[tuple[Hashable, list[dict]]]:
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        import zmq
        ctx = zmq.Context.instance()
        poller = zmq.Poller()
        sockets: dict[Hashable, zmq.Socket] = {}
        keys: dict[zmq.Socket, Hashable] = {}
        last_seq: dict[Hashable, int] = {}
        try:
            while not self._stop.is_set():
                while True:
                    try:
                        op, key, endpoint, topic = self._commands.get_nowait()
                    except queue.Empty:
                        break
                    old = sockets.pop(key, None)
                    if old is not None:
                        poller.unregister(old)
                        keys.pop(old, None)
                        old.close(linger=0)
                        last_seq.pop(key, None)
                    if op == "sub":
                        sock = ctx.socket(zmq.SUB)
                        sock.setsockopt(zmq.SUBSCRIBE, (topic or "").encode())
                        sock.connect(endpoint)
                        sockets[key], keys[sock] = sock, key
                        poller.register(sock, zmq.POLLIN)
                for sock, _ in poller.poll(self.poll_ms) if sockets else []:
                    key = keys[sock]
                    while True:
                        try:
                            parts = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if len(parts) < 3:
                            continue
                        seq = int.from_bytes(parts[1], "big", signed=True)
                        prev = last_seq.get(key)
                        if prev is not None and seq > prev + 1:
                            self.gaps[key] = self.gaps.get(key, 0) + seq - prev - 1
                        last_seq[key] = seq
                        try:
                            events = decode_batch(parts[2])
                        except Exception:   # a malformed batch must not kill the listener
                            log.warning("undecodable KV event batch from %s", key, exc_info=True)
                            continue
                        self.received += 1
                        self._out.put((key, events))
                if not sockets:
                    self._stop.wait(self.poll_ms / 1000)
        finally:
            for sock in sockets.values():
                sock.close(linger=0)
