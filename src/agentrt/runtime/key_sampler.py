"""Which prompt blocks the safety net's shadow LRU samples, at a cost proportional to what is new.

Model
- A block's key is its (tenant, hash id) mixed to 64 bits (Fibonacci hashing: sequential ids, as
  generated traces have, spread evenly); it is sampled when the key is below the threshold
  2^64 x R (R = 2^-bits, SHARDS's spatial sampling: every call that reads a block agrees).
- Hash ids are chained (a block's id depends on every block before it, in vLLM and in traces),
  so two prompts share exactly the prefix up to their last equal id. A thread's next prompt
  usually extends its last one: the shared prefix is found by a binary search over the ids, its
  sampled blocks are reused, and only the blocks after it are hashed. Of the last prompt only
  every `MARK`-th id is kept (not the prompt's whole id list, which would stay alive as long as
  its thread; docs/notes/results-details.md, "Policy overheads"), so the search finds the shared
  prefix to within `MARK` blocks and those few are hashed again.
- Halving R (`halve`) invalidates what was kept; prompts are kept per (tenant, workflow, agent)
  and dropped when their workflow ends (`forget`), so the table is bounded by live threads.
"""

from __future__ import annotations

import zlib
from bisect import bisect_left

MIX = 0x9E3779B97F4A7C15      # 2^64 / golden ratio
M64 = (1 << 64) - 1
MARK = 16                     # every MARK-th id of a thread's last prompt is kept


class SampledPrompt:
    """A prompt's sampled blocks (their positions, ascending, and keys) and its ids at positions
    0, MARK, 2 x MARK, ... below `n` (`marks`)."""
    __slots__ = ("marks", "n", "pos", "keys", "bits")

    def __init__(self, marks: list[int], n: int, pos: list[int], keys: list[int], bits: int) -> None:
        self.marks = marks
        self.n = n
        self.pos = pos
        self.keys = keys
        self.bits = bits


class KeySampler:
    __slots__ = ("bits", "threshold", "_salts", "_prompts")

    def __init__(self) -> None:
        self.bits = 0
        self.threshold = 1 << 64
        self._salts: dict[str, int] = {}
        # (tenant, workflow) -> agent -> its latest prompt
        self._prompts: dict[tuple[str, str], dict[str, SampledPrompt]] = {}

    @property
    def rate(self) -> float:
        return 1.0 / (1 << self.bits)

    def halve(self) -> None:
        self.bits += 1
        self.threshold = (1 << 64) >> self.bits

    def _salt(self, tenant: str) -> int:
        s = self._salts.get(tenant)
        if s is None:
            if len(self._salts) > 65536:
                self._salts.clear()
            s = self._salts[tenant] = zlib.crc32(tenant.encode()) << 32
        return s

    def sample(self, tenant: str, hash_ids, start: int, n: int, pos: list[int], keys: list[int]) -> None:
        """Append the sampled blocks of `hash_ids[start:n]` to `pos` and `keys`."""
        salt, thr = self._salt(tenant), self.threshold
        for i in range(start, n):
            k = ((hash_ids[i] ^ salt) * MIX) & M64
            if k < thr:
                pos.append(i)
                keys.append(k)

    def prompt(self, tenant: str, workflow: str, agent: str | None, hash_ids, n: int) -> SampledPrompt:
        """The sampled blocks of a prompt's first `n`, reusing the thread's previous prompt."""
        n = min(n, len(hash_ids))
        threads = self._prompts.get((tenant, workflow))
        if threads is None:
            threads = self._prompts[(tenant, workflow)] = {}
        prev = threads.get(agent or "")
        start, pos, keys = 0, [], []
        if prev is not None and prev.bits == self.bits:
            marks = prev.marks
            # the most marks equal to this prompt's ids at their positions (chained ids: equal at
            # a position means equal up to it), by binary search over the marks below n
            lo, hi = 0, min(len(marks), (n + MARK - 1) // MARK)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if hash_ids[(mid - 1) * MARK] == marks[mid - 1]:
                    lo = mid
                else:
                    hi = mid - 1
            start = (lo - 1) * MARK + 1 if lo else 0     # equal up to and with the last equal mark
            cut = bisect_left(prev.pos, start)
            pos, keys = prev.pos[:cut], prev.keys[:cut]
        self.sample(tenant, hash_ids, start, n, pos, keys)
        got = SampledPrompt(list(hash_ids[0:n:MARK]), n, pos, keys, self.bits)
        threads[agent or ""] = got
        return got

    def keys_of(self, tenant: str, hash_ids) -> list[int]:
        """Sampled keys of some blocks (a call's output blocks), in order."""
        pos: list[int] = []
        keys: list[int] = []
        self.sample(tenant, hash_ids, 0, len(hash_ids), pos, keys)
        return keys

    def forget(self, tenant: str, workflow: str) -> None:
        self._prompts.pop((tenant, workflow), None)

    def state_bytes(self) -> int:
        return sum(100 + sum(120 + 16 * len(p.keys) + 40 * len(p.marks) for p in t.values())
                   for t in self._prompts.values())
