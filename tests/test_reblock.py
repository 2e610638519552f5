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


def test_an_answer_after_a_partial_trace_block_inside_a_full_engine_block(tmp_path):
    # 62 trace tokens (3 full trace blocks and a partial one, id 4) are sent as 16 tokens: two
    # full engine blocks, the second holding the partial trace block. The answer's trace ids
    # continue after id 3, so a later prompt carrying it holds other tokens in engine block 1:
    # it shares no answer block, and the written trace stays chained (AG2 logs hit this).
    h = TraceHeader(block_size=16)
    first = _c("w", 0, [1, 2, 3, 4], 62, out=40, outs=[5, 6, 7])
    later = _c("w", 1, [1, 2, 3, 5, 6, 7, 8, 9], 128)
    head, (f, l) = reblock(h, [first, later], 4, 8, lambda c: round(c.input_length * 0.25),
                           lambda c: round(c.output_length * 0.25))
    assert len(f.hash_ids) == 2 and f.hash_ids[0] == l.hash_ids[0] and f.hash_ids[1] != l.hash_ids[1]
    assert len(f.output_hash_ids) == 1 and f.output_hash_ids[0] not in l.hash_ids
    path = tmp_path / "e.jsonl"
    write_trace(path, head, [f, l])
    assert len(list(TraceReader(str(path)))) == 2
