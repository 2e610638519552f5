"""agentrt.enginebench.iterations: vLLM's per-iteration log lines, parsed and summarised."""

from __future__ import annotations

import pytest

from agentrt.enginebench import iterations as it

# copied from a vLLM 0.32 API server's log (`--enable-logging-iteration-details`)
LOG = """\
(APIServer pid=4716) INFO 12-06 12:13:06 [loggers.py:199] Engine 000: Iteration(1): 1 context requests, 351 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 68.56 ms, CPU KV cache usage: 4.3%
(APIServer pid=4716) INFO 12-06 12:13:06 [loggers.py:199] Engine 000: Iteration(2): 22 context requests, 2047 context tokens, 1 generation requests, 1 generation tokens, iteration elapsed time: 368.67 ms, CPU KV cache usage: 33.3%
(APIServer pid=4716) INFO 12-06 12:13:07 [loggers.py:199] Engine 000: Iteration(5): 0 context requests, 0 context tokens, 16 generation requests, 16 generation tokens, iteration elapsed time: 8.47 ms, CPU KV cache usage: 25.1%
(APIServer pid=4716) INFO 12-06 12:13:07 [loggers.py:199] Engine 000: Iteration(6): 0 context requests, 0 context tokens, 16 generation requests, 16 generation tokens, iteration elapsed time: 6.53 ms, CPU KV cache usage: 25.1%
(APIServer pid=4716) INFO 12-06 12:13:07 [loggers.py:199] Engine 000: Iteration(7): 0 context requests, 0 context tokens, 1 generation requests, 1 generation tokens, iteration elapsed time: 3.00 ms, CPU KV cache usage: 25.1%
(APIServer pid=4716) INFO 12-06 12:13:08 [api_server.py:1] some other line
"""


def test_lines_parse_to_requests_tokens_and_seconds():
    rows = it.parse(LOG)
    assert len(rows) == 5
    assert rows[1] == (22, 2047, 1, 1, pytest.approx(0.36867))


def test_summary_splits_prefill_from_decode_steps_by_batch():
    s = it.summarize(it.parse(LOG), makespan_s=1.0)
    assert s["iterations"] == 5 and s["prefill_iterations"] == 2
    assert s["busy_s"] == pytest.approx(0.45523) and s["busy_share"] == pytest.approx(0.45523)
    assert s["prefill_busy_s"] == pytest.approx(0.43723)
    assert s["decode_step_ms"] == {"1": {"iterations": 1, "median_ms": pytest.approx(3.0)},
                                   "16-31": {"iterations": 2, "median_ms": pytest.approx(7.5)}}


def test_no_lines_means_not_logged(tmp_path):
    assert it.summarize([]) is None
    assert it.from_log(tmp_path / "missing.log") is None
    (tmp_path / "v.log").write_text("INFO nothing here\n")
    assert it.from_log(tmp_path / "v.log") is None
