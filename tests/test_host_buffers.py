"""The host tier's copies (`agentrt.vllm.worker.HostBuffers`): synchronous on the CPU, on a side
stream on CUDA (that part runs where a GPU is: benchmarks/gpu/run.py runs it on one)."""

from __future__ import annotations

import pytest
import torch

from agentrt.vllm.worker import HostBuffers, runs

CUDA = torch.cuda.is_available()


def test_runs_group_consecutive_slots():
    assert runs([(3, 10), (4, 11), (5, 7), (9, 1), (10, 2)]) == [(0, 3, 3), (3, 9, 2)]
    assert runs([]) == [] and runs([(0, 5)]) == [(0, 0, 1)]


def _caches(device: str, dim: int, num_blocks: int = 16):
    torch.manual_seed(0)
    shape = [num_blocks, 2, 4, 8] if dim == 0 else [2, num_blocks, 4, 8]
    return {"l0": torch.randn(shape, device=device), "l1": torch.randn(shape, device=device)}


def _block(t, d, b):
    return t.select(d, b).clone()


@pytest.mark.parametrize("dim", [0, 1])
def test_cpu_round_trip_is_synchronous_and_exact(dim):
    kv = _caches("cpu", dim)
    hb = HostBuffers(kv, 16, capacity=8, asynchronous=True)     # asked, but a CPU cache copies in place
    assert not hb.asynchronous and hb.stream is None
    before = {name: [_block(t, dim, b) for b in (2, 3, 9)] for name, t in kv.items()}
    hb.save([(2, 0), (3, 1), (9, 5)])
    for t in kv.values():
        t.zero_()
    hb.load([(0, 4), (1, 5), (5, 11)])
    for name, t in kv.items():
        for got_b, want in zip((4, 5, 11), before[name]):
            assert torch.equal(_block(t, dim, got_b), want)
    assert hb.take_failed() == set()


def test_a_broken_buffer_reports_every_later_load():
    kv = _caches("cpu", 0)
    hb = HostBuffers(kv, 16, capacity=4)
    hb.save([(99, 0)])                     # no such block: the save fails
    assert hb.broken
    hb.load([(0, 3), (1, 4)])
    assert hb.take_failed() == {3, 4} and hb.take_failed() == set()


@pytest.mark.skipif(not CUDA, reason="no CUDA device here (the GPU check script runs this on one)")
@pytest.mark.parametrize("dim", [0, 1])
def test_cuda_round_trip_on_a_side_stream(dim):
    kv = _caches("cuda", dim)
    hb = HostBuffers(kv, 16, capacity=8)
    assert hb.asynchronous and all(h.is_pinned() for _, h, _ in hb.layers)
    want = {name: [_block(t, dim, b) for b in (2, 3, 9)] for name, t in kv.items()}
    hb.save([(2, 0), (3, 1), (9, 5)])
    for t in kv.values():                  # vLLM reuses the blocks on its own stream right after
        t.zero_()
    hb.load([(0, 4), (1, 5), (5, 11)])
    for name, t in kv.items():             # read on the model's stream: ordered after the load
        for got_b, w in zip((4, 5, 11), want[name]):
            assert torch.equal(_block(t, dim, got_b), w)
