"""`trace/reblock.py`: a trace in the engine's terms (tokens sent, one hash id per engine block)."""

from __future__ import annotations

from agentrt.trace.reblock import reblock
from agentrt.trace.schema import Call, TraceHeader
from agentrt.trace.writer import write_trace
from agentrt.trace.reader import TraceReader


def _c(wf, i, ids, n, out=0, outs=(), tenant="default"):
    return Call(workflow=wf, call=i, input_length=n, output_length=out, hash_ids=list(ids),
                output_hash_ids=list(outs), tenant=tenant, timestamp=0.0 if i == 0 else None)


def test_engine_blocks_share_exactly_what_the_prompts_share(tmp_path):
    h = TraceHeader(block_size=16)
    # 4 tokens per trace id (scale 0.25), engine blocks of 8 tokens = 2 trace ids
    first = _c("w", 0, [1, 2, 3, 4, 5], 72, out=40, outs=[6, 7, 8])        # 4.5 blocks + answer
    later = _c("w", 1, [1, 2, 3, 4, 6, 7, 8, 9], 128)                       # carries the answer
    other = _c("x", 0, [1, 2, 30, 31], 64)                                  # shares one engine block
    alien = _c("y", 0, [1, 2, 3, 4], 64, tenant="t2")                      # another tenant
    scale = 0.25
    head, (f, l, o, a) = reblock(h, [first, later, other, alien], 4, 8,
                                 lambda c: round(c.input_length * scale), lambda c: round(c.output_length * scale))
    assert head.block_size == 8
    assert f.input_length == 18 and f.output_length == 10 and len(f.hash_ids) == 3   # 2 full + 1 partial
    assert l.hash_ids[:2] == f.hash_ids[:2] and o.hash_ids[0] == f.hash_ids[0]
    assert o.hash_ids[1] != f.hash_ids[1]
    assert f.hash_ids[2] not in l.hash_ids          # a partial block is nobody's hit
    # the answer completes engine block 2 (tokens 16-23 of the 28 sent and generated); the later
    # prompt lists it where it carries the answer
    assert f.output_hash_ids == l.hash_ids[2:3] and len(f.output_hash_ids) == 1
    assert not set(a.hash_ids) & set(f.hash_ids + l.hash_ids)
    path = tmp_path / "e.jsonl"
    write_trace(path, head, [f, l, o, a])
    assert len(list(TraceReader(str(path)))) == 4   # chained: the reader takes it
