"""The runtime's state, keyed by agent identity: workflows, agent threads, agent profiles, block tags.

- `WorkflowState`: one live workflow run: its tenant, the agents it has called in order, its
  threads, when it was last heard from. Dropped when the workflow ends or goes silent. Keyed by
  `key` = (tenant, id) everywhere: two tenants' `run-42` are two workflows.
- `Thread`: one agent inside one workflow (its growing prompt); the unit a block belongs to.
  Policies cache per-thread values on it (`value`, `pinned_until`).
- `AgentProfile`: what is known of an agent across workflows: its anchor (the leading blocks
  all its calls share, i.e. its system prompt and tools), calls seen, think times after its calls.
- Block tags: `Block.meta` holds the thread that used the block (most blocks have one user) or,
  once a second thread uses it, a `BlockTag` with all of them; `threads_of(meta)` reads
  either. Tags hold threads of ended workflows only until the next prune, so they stay bounded.
  A tag keeps its threads in an insertion-ordered dict, not a set: a set of Threads iterates in
  id() (memory address) order, which depends on what ran before in the process, and policies
  sum floats over a block's threads, so the order must follow the replay alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Thread:
    __slots__ = ("workflow", "agent", "calls", "value", "pinned_until", "last_node")

    def __init__(self, workflow: "WorkflowState", agent: str) -> None:
        self.workflow = workflow
        self.agent = agent
        self.calls = 0
        self.value = 0.0              # a policy's cached per-thread priority
        self.pinned_until = -1.0      # TTL policies: pinned while now < pinned_until
        self.last_node = None         # deepest cached block of its latest call

    @property
    def active(self) -> bool:
        return not self.workflow.ended

    def __repr__(self) -> str:
        return f"Thread({self.workflow.id}/{self.agent})"


class WorkflowState:
    __slots__ = ("id", "tenant", "key", "path", "threads", "last_seen", "ended", "running", "last_finish",
                 "last_agent", "signal", "extra", "calls")

    def __init__(self, wid: str, tenant: str, now: float) -> None:
        self.id = wid
        self.tenant = tenant
        self.key = (tenant, wid)               # ids are unique only within a tenant
        self.path: list[str] = []              # agents called so far, in order
        self.threads: dict[str, Thread] = {}
        self.last_seen = now
        self.ended = False
        self.running = 0                       # calls in flight
        self.last_finish: float | None = None
        self.last_agent: str | None = None     # agent of the latest finished call
        self.signal: list[float] | None = None  # the latest call's semantic signal
        self.extra: dict = {}                  # per-policy scratch (bounded with the workflow)
        self.calls = 0                         # calls arrived (the sum of its threads' calls)

    def thread(self, agent: str) -> Thread:
        t = self.threads.get(agent)
        if t is None:
            t = self.threads[agent] = Thread(self, agent)
        return t


@dataclass(slots=True)
class AgentProfile:
    name: str
    tenant: str
    anchor: list[int] = field(default_factory=list)  # hash ids shared by all its calls so far
    anchor_workflows: int = 0                        # distinct workflows that confirmed the anchor
    calls: int = 0
    think_total_s: float = 0.0
    think_count: int = 0
    last_workflow: str | None = None

    @property
    def mean_think_s(self) -> float | None:
        return self.think_total_s / self.think_count if self.think_count else None

    def observe_prompt(self, hash_ids: list[int], n_full: int, workflow: str, max_blocks: int) -> None:
        self.calls += 1
        if not self.anchor and self.anchor_workflows == 0:
            self.anchor = list(hash_ids[:min(n_full, max_blocks)])
            self.anchor_workflows = 1
            self.last_workflow = workflow
            return
        if workflow == self.last_workflow:
            return
        self.last_workflow = workflow
        a = self.anchor
        n = min(len(a), n_full)
        i = 0
        while i < n and a[i] == hash_ids[i]:
            i += 1
        del a[i:]
        self.anchor_workflows += 1


class BlockTag:
    __slots__ = ("threads",)
    PRUNE_AT = 16

    def __init__(self, threads: "dict[Thread, None] | None" = None) -> None:
        # a dict used as an insertion-ordered set (see the module docstring)
        self.threads: dict[Thread, None] = threads if threads is not None else {}

    def add(self, t: Thread) -> None:
        ts = self.threads
        ts[t] = None
        if len(ts) > self.PRUNE_AT:
            self.threads = {x: None for x in ts if not x.workflow.ended}

    def active_threads(self) -> list[Thread]:
        return [t for t in self.threads if not t.workflow.ended]

    def agents(self) -> list[str]:
        """Agents of the tag's threads, each once, in the order they first used the block."""
        return list(dict.fromkeys(t.agent for t in self.threads))


_NONE: tuple = ()


def threads_of(meta) -> "tuple[Thread, ...] | dict[Thread, None]":
    """The threads recorded in a block's `meta` (None, one Thread, or a BlockTag), in the order
    they first used the block; iterate it, never rely on more than iteration and `in`."""
    if meta is None:
        return _NONE
    if type(meta) is Thread:
        return (meta,)
    return meta.threads


def tag_block(block, th: Thread) -> bool:
    """Record that `th` used `block`; False if it already had (so its ancestors have too)."""
    meta = block.meta
    if meta is None:
        block.meta = th
    elif meta is th:
        return False
    elif type(meta) is Thread:
        block.meta = BlockTag({meta: None, th: None})
    elif th in meta.threads:
        return False
    else:
        meta.add(th)
    return True


def tag_path(node, th: Thread) -> None:
    """Record that `th` used `node` and its ancestors up to the tenant's root. A thread's prompts
    only grow, so once a block already carries it, so do its ancestors: the walk stops there."""
    while node is not None and node.parent is not None:
        if not tag_block(node, th):
            return
        node = node.parent
