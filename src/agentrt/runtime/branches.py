"""Dead branches of a live thread: blocks a thread used once and will not read again.

A thread (one agent inside one workflow) reads, at each call, its system prompt and the history
its framework keeps. Most frameworks only append, so each prompt extends the last; but when the
framework rewrites the history (context compaction, a sliding window, a tool result replaced by its
summary, a retried step that drops the failed attempt), the new prompt leaves the old path at some
block and the old branch below it is never read by that thread again. Its blocks stay tagged with
the live thread, so a lifecycle-aware policy keeps them as live cache as long as the workflow runs.

`untag_dead_branch(old, new, thread)` is called by the runtime when a thread's latest cached block
moves from `old` to `new` (policies opt in with `untags_dead_branches`): it finds the deepest
common ancestor of the two and removes the thread from the tags of the blocks of `old`'s branch
below it. Blocks other threads still use keep those threads; blocks no live thread uses become
retired. Cost: proportional to the two branches below the common ancestor, i.e. to what changed.
Parallel calls of one thread (an agent fanned out with different histories, as parallel subagents
of one name are) are all live: the runtime untags only when no other call of the thread is in
flight, so the earlier finisher's branch goes when the last one finishes. A branch left before a
parallel stretch may then stay tagged until its workflow ends (a bounded leak, never a wrong
eviction of live cache).
"""

from __future__ import annotations

from agentrt.runtime.state import BlockTag, Thread


def common_ancestor(a, b):
    """The deepest block on both paths (a tenant's root at worst; None across tenants)."""
    seen = set()
    while a is not None or b is not None:
        if a is not None:
            if a in seen:
                return a
            seen.add(a)
            a = a.parent
        if b is not None:
            if b in seen:
                return b
            seen.add(b)
            b = b.parent
    return None


def untag_dead_branch(old, new, thread: Thread) -> int:
    """Remove `thread` from the blocks on `old`'s path below its common ancestor with `new`.

    Returns how many blocks lost the thread.
    """
    stop = common_ancestor(old, new)
    n = 0
    node = old
    while node is not None and node is not stop and node.parent is not None:
        meta = node.meta
        if meta is thread:
            node.meta = None
            n += 1
        elif type(meta) is BlockTag and thread in meta.threads:
            del meta.threads[thread]
            n += 1
        node = node.parent
    return n
