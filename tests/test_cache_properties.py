"""Hypothesis: thousands of random insert / lock / unlock / evict / demote / load / grow / preempt
sequences keep every invariant of the two-tier radix cache after every step."""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentrt.cache import GPU, RadixKVCache

prompts = st.lists(st.integers(0, 3), min_size=1, max_size=6)


class CacheMachine(RuleBasedStateMachine):
    @initialize(gpu=st.integers(1, 12), host=st.integers(0, 10))
    def setup(self, gpu, host):
        self.cache = RadixKVCache(gpu, host_capacity=host, block_bytes=1)
        self.admitted = []     # leases admitted, prompt not yet computed
        self.running = []      # leases computed, not finished
        self.now = 0.0

    def _tick(self):
        self.now += 1.0
        return self.now

    @rule(tenant=st.sampled_from(["a", "b"]), ids=prompts, extra=st.integers(0, 3))
    def acquire(self, tenant, ids, extra):
        c = self.cache
        before = (c.gpu_used, c.host_used, c.reserved, c.locked_gpu, c.touch_clock)
        lease = c.acquire(tenant, ids, len(ids), extra, self._tick())
        if lease is None:
            assert (c.gpu_used, c.host_used, c.reserved, c.locked_gpu, c.touch_clock) == before
            assert len(ids) + extra > c.free + c.evictable
        else:
            self.admitted.append((lease, extra))

    @precondition(lambda self: self.admitted)
    @rule(i=st.integers(0, 100))
    def commit(self, i):
        lease, extra = self.admitted.pop(i % len(self.admitted))
        self.cache.commit_prompt(lease, self._tick())
        self.running.append((lease, extra))

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 100), outs=st.lists(st.integers(0, 3), max_size=3))
    def release(self, i, outs):
        lease, extra = self.running.pop(i % len(self.running))
        self.cache.release(lease, outs[:extra], self._tick())

    @precondition(lambda self: self.admitted or self.running)
    @rule(i=st.integers(0, 100), n=st.integers(1, 3))
    def grow(self, i, n):
        """A decoding request crosses into new blocks: free ones, else evicted, else refused."""
        held = self.running if i % 2 and self.running or not self.admitted else self.admitted
        k = i % len(held)
        lease, extra = held[k]
        c = self.cache
        before = (c.gpu_used, c.host_used, c.reserved, c.locked_gpu, c.touch_clock, lease.reserved)
        room = c.free + c.evictable
        if c.grow(lease, n):
            assert n <= room and lease.reserved == before[-1] + n
            assert c.free == room - n - c.evictable and c.free >= 0
            held[k] = (lease, extra + n)
        else:
            assert n > room
            assert (c.gpu_used, c.host_used, c.reserved, c.locked_gpu, c.touch_clock, lease.reserved) == before

    @precondition(lambda self: self.admitted or self.running)
    @rule(i=st.integers(0, 100), upto=st.integers(0, 6), outs=st.lists(st.integers(0, 3), max_size=3))
    def preempt(self, i, upto, outs):
        """Preemption: keep what was computed (prompt blocks, completed outputs), unlock, free;
        a re-admission right away hits every block of the kept path."""
        c = self.cache
        if i % 2 and self.admitted or not self.running:
            lease, _ = self.admitted.pop(i % len(self.admitted))
            c.commit_prompt(lease, self._tick(), upto)      # a prefill cut short after `upto` blocks
        else:
            lease, extra = self.running.pop(i % len(self.running))
            c.cache_output(lease, outs[:extra])
        assert lease.depth == len(lease.node.path())
        kept = [b.hash for b in lease.node.path()]
        reserved = c.reserved - lease.reserved
        c.release(lease)
        assert c.reserved == reserved and lease.reserved == 0
        again = c.acquire(lease.tenant, kept, len(kept), 1, self._tick())
        if again is not None:
            assert again.gpu_hit == len(kept)
            self.admitted.append((again, 1))

    @precondition(lambda self: self.admitted)
    @rule(i=st.integers(0, 100))
    def abort(self, i):
        lease, _ = self.admitted.pop(i % len(self.admitted))
        self.cache.release(lease, [], self._tick())

    @rule(n=st.integers(1, 5))
    def evict(self, n):
        c = self.cache
        evictable = c.evictable
        done = c.evict(n)
        assert done == min(n, evictable)

    @invariant()
    def structure(self):
        if hasattr(self, "cache"):
            self.cache.check_invariants()

    @invariant()
    def held_paths_stay_on_gpu(self):
        for lease, _ in getattr(self, "admitted", []) + getattr(self, "running", []):
            for b in lease.node.path():
                assert b.tier == GPU and b.lock_ref > 0


CacheMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestCache = CacheMachine.TestCase
