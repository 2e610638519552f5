"""Import AG2/AutoGen group-chat logs as a workflow trace (`agentrt import ag2 DIR -o FILE`).

Log shape (the Who&When CaptainAgent logs in ../shared/traces/ag2-captainagent): one JSON object
per file with `history`, a list of `{name, role, content}` in speaking order, and
`system_prompt`, `{agent name: its system prompt}`. One workflow per file, named after the file.

How a log becomes calls:
- The first message starts the chat (CaptainAgent opens every nested chat with a templated task
  message sent on the first expert's behalf); it is the workflow's task and joins the history
  without a call. `first_is_call=True` makes it a call like any other.
- A speaker with a system prompt is an LLM agent. Its call's prompt is its system prompt followed
  by the whole conversation so far, as a group chat sends it (the agent's own earlier messages as
  `assistant`, everybody else's as `user`); its output is its message. An agent called again
  therefore extends its earlier prompt and output.
- A speaker without one (the code terminal, a human) is a tool or human step: its message joins
  the history and `think_ms` (default 3 s, a guess for running a short script) is added before
  the next LLM call.
- Tokens: each message is its content's tokens (`tokens.get_counter`, default the offline
  estimate) plus 4 for the chat template's role header and end-of-turn marker (Llama-3's format
  spends 4 to 5 tokens a message).
- Hash ids come from the text: the system prompt is keyed by a digest of its text and each message
  by (role as the caller sees it, speaker, digest of its content), all through one `BlockHasher`,
  so equal prefixes get equal ids within a file and across files (agents that share a system
  prompt share its blocks).
- Arrivals: closed loop with `concurrency` workflows at once, or Poisson at `rate` per second.
Bad files (not JSON, nested too deeply, a missing or mistyped field, text or a file name the trace
reader would refuse, a call beyond the reader's bounds, no LLM turn) are reported one line each
and skipped; the rest still import. The trace is written beside `out` under a temporary name and
renamed when complete, so a failed import leaves no half-written trace. The CLI fails only when
no file could be imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from agentrt.errors import AgentrtError
from agentrt.trace.limits import (MAX_LINE_BYTES, MAX_TIME_MS, MAX_TOKENS, bad_text,
                                  bad_workflow_id, show)
from agentrt.trace.schema import Call, TraceHeader
from agentrt.trace.writer import TraceWriter, temp_beside
from agentrt.workloads.base import GenConfig, WorkflowBuilder
from agentrt.workloads.hashing import BlockHasher
from agentrt.workloads.tokens import Counter, get_counter

TEMPLATE_TOKENS = 4
DEFAULT_THINK_MS = 3000.0


class LogError(ValueError):
    """A log file that does not have the expected shape."""


@dataclass(slots=True)
class ImportResult:
    workflows: int = 0
    calls: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)   # (file, problem)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _natural(p: Path) -> tuple:
    # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts
    return tuple(int(t) if t.isdecimal() else t for t in re.split(r"(\d+)", p.name))


# a log is read whole; one chat's log is a few MB at most (a trace line holds 48 MiB)
MAX_LOG_BYTES = 256 << 20


def log_files(path: str | Path) -> list[Path]:
    """The `.json` logs of a directory in natural order (2 before 10), or the file itself."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise AgentrtError(f"{path}: no such file or directory")
    return sorted((f for f in p.iterdir() if f.suffix == ".json" and f.is_file()), key=_natural)


def parse_log(path: Path) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(messages as (speaker, content), system prompts) of one log, or LogError naming the problem."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise LogError(f"cannot read the file ({e.strerror})") from None
    if size > MAX_LOG_BYTES:        # read whole: refuse before holding it
        raise LogError(f"larger than {MAX_LOG_BYTES:,} bytes ({size:,})")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise LogError(f"not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise LogError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise LogError("not valid JSON (nested too deeply)") from None
    except ValueError:                 # the only other ValueError: int()'s limit on digits
        raise LogError(f"not valid JSON (an integer of more than {sys.get_int_max_str_digits():,} "
                       f"digits)") from None
    if not isinstance(obj, dict):
        raise LogError(f"expected a JSON object, got {type(obj).__name__}")
    hist, sys_prompts = obj.get("history"), obj.get("system_prompt")
    if not isinstance(hist, list):
        raise LogError("field 'history': missing or not a list")
    if not isinstance(sys_prompts, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in sys_prompts.items()):
        raise LogError("field 'system_prompt': missing or not an object of agent name -> text")
    for k, v in sys_prompts.items():
        why = bad_text(k) or bad_text(v)
        if why:
            raise LogError(f"system_prompt[{show(k)}]: {why}")
    msgs = []
    for i, m in enumerate(hist):
        if not isinstance(m, dict):
            raise LogError(f"history[{i}]: expected an object, got {type(m).__name__}")
        name, content = m.get("name"), m.get("content")
        if not isinstance(name, str) or not name:
            raise LogError(f"history[{i}].name: missing or not a string")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise LogError(f"history[{i}].content: expected a string, got {type(content).__name__}")
        for key, text in (("name", name), ("content", content)):
            why = bad_text(text)
            if why:
                raise LogError(f"history[{i}].{key}: {why}")
        msgs.append((name, content))
    return msgs, sys_prompts


class Ag2Importer:
    """Turns logs into calls; one instance shares its hash ids over all the files it imports."""

    def __init__(self, *, block_size: int = 16, think_ms: float = DEFAULT_THINK_MS,
                 tokenizer: str = "estimate", first_is_call: bool = False,
                 rate: float | None = None, concurrency: int | None = None, seed: int = 0) -> None:
        if think_ms < 0:
            raise AgentrtError(f"think time must be >= 0 ms, got {think_ms}")
        self.cfg = GenConfig(workflows=1, rate=rate, concurrency=concurrency, seed=seed,
                             block_size=block_size)
        self.hasher = BlockHasher(block_size)
        self.count: Counter = get_counter(tokenizer)
        self.think_ms = think_ms
        self.first_is_call = first_is_call
        self.rng = np.random.default_rng(seed)
        self._t_ms = 0.0
        self._n = 0

    def header(self, source: str) -> TraceHeader:
        return TraceHeader(block_size=self.cfg.block_size, name="ag2-import",
                           description="AG2/AutoGen group chats imported by agentrt", source=source,
                           concurrency=self.cfg.concurrency if self.cfg.rate is None else None)

    def workflow(self, path: Path, name: str | None = None) -> list[Call]:
        wid = name or path.stem
        why = bad_workflow_id(wid)
        if why:
            raise LogError(f"{'name' if name else 'file name'}: as a workflow id it {why}")
        msgs, sys_prompts = parse_log(path)
        if not msgs:
            raise LogError("field 'history' is empty")
        if not any(n in sys_prompts for n, _ in msgs[0 if self.first_is_call else 1:]):
            raise LogError("no message from an agent with a system prompt (no LLM call to import)")
        if self.cfg.rate is not None and self._n > 0:
            self._t_ms += float(self.rng.exponential(1000.0 / self.cfg.rate))
        b = WorkflowBuilder(self.hasher, wid, self.cfg.tenant, round(self._t_ms, 3), self.rng, self.cfg)
        log: list[tuple[str, str, int]] = []     # (speaker, digest, tokens)
        read: dict[str, int] = {}                 # how much of the log each agent's thread holds
        think = 0.0
        for i, (name, text) in enumerate(msgs):
            entry = (name, _digest(text), self.count(text) + TEMPLATE_TOKENS)
            if name in sys_prompts and (i > 0 or self.first_is_call):
                new = []
                if name not in read:
                    sp = sys_prompts[name]
                    new.append((("sys", _digest(sp)), self.count(sp) + TEMPLATE_TOKENS))
                # the agent's own earlier messages are in its thread already, as its outputs
                new += [self._seg(name, e) for e in log[read.get(name, 0):]]
                b.call(name, new, entry[2], after=None, think_ms=think,
                       output_key=self._seg(name, entry)[0])
                read[name] = len(log) + 1
                think = 0.0
            elif name not in sys_prompts:
                think += self.think_ms
            log.append(entry)
        calls = b.finish()
        _check_bounds(calls)
        self._n += 1
        return calls

    @staticmethod
    def _seg(viewer: str, entry: tuple[str, str, int]) -> tuple:
        speaker, dig, n = entry
        return (("msg", "assistant" if speaker == viewer else "user", speaker, dig), n)


def _check_bounds(calls: list[Call]) -> None:
    """LogError unless the trace reader accepts every call (trace/limits.py): a huge message or
    think time is one bad file, not a trace that cannot be read."""
    for c in calls:
        where = f"call {c.call} ({c.agent})"
        if c.input_length > MAX_TOKENS or c.output_length > MAX_TOKENS:
            raise LogError(f"{where}: {max(c.input_length, c.output_length):,} tokens, more than the "
                           f"{MAX_TOKENS:,} a trace allows")
        if c.think_ms > MAX_TIME_MS or (c.timestamp or 0.0) > MAX_TIME_MS:
            raise LogError(f"{where}: think time or start past {MAX_TIME_MS:.0e} ms, the most a trace allows")
        if len(orjson.dumps(c.to_json())) > MAX_LINE_BYTES:
            raise LogError(f"{where}: its trace line would be longer than {MAX_LINE_BYTES:,} bytes")


def import_ag2(src: str | Path, out: str | Path, importer: Ag2Importer | None = None) -> ImportResult:
    """Import every log under `src` into the trace `out`; bad files are collected, not fatal.

    `out` is replaced only when the whole trace is written, and holds at least one workflow (with
    none imported it is left as it was)."""
    imp = importer or Ag2Importer()
    files = log_files(src)
    res = ImportResult()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(out)
    try:
        with TraceWriter(tmp, imp.header(f"AG2 logs from {src}")) as w:
            for f in files:
                try:
                    calls = imp.workflow(f)
                except (LogError, OSError) as e:
                    res.errors.append((str(f), str(e)))
                    continue
                for c in calls:
                    w.write(c)
                res.workflows += 1
                res.calls += len(calls)
        if res.workflows:
            os.replace(tmp, out)
        else:
            tmp.unlink(missing_ok=True)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return res
