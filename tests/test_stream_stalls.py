"""benchmarks/stream_stalls.py: the observer's gaps classified by what vLLM logged inside them."""

from benchmarks.stream_stalls import STAMPED, classify


def test_a_gap_is_the_engines_only_when_one_iteration_fills_half_of_it():
    times = [0.0, 0.05, 0.55, 0.60, 1.20, 1.25, 1.75]
    its = ([(0.1 + 0.005 * i, 4.0) for i in range(80)]         # 0.50 s gap: logged every 5 ms, short
           + [(1.0, 450.0)]                                      # 0.60 s gap: one 450 ms iteration
           + [(1.5, 4.0)])                                       # 0.50 s gap: one short iteration only
    g = classify(times, its, 0.1)
    assert [x["kind"] for x in g] == ["iterating", "long_iteration", "quiet"]
    assert [x["iterations"] for x in g] == [80, 1, 1] and g[1]["longest_iteration_s"] == 0.45
    assert classify([0.0, 0.05, 0.1], its, 0.1) == []          # no gap over the threshold


def test_the_stamped_iteration_line_of_vllm_0_32_parses():
    line = ("INFO 1796588029.737 [loggers.py:199] Engine 000: Iteration(1): 1 context requests, 118 context "
            "tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 33.28 ms, CPU KV cache "
            "usage: 1.6%")
    m = STAMPED.search(line)
    assert m and float(m.group(1)) == 1796588029.737 and m.group(3) == "118" and float(m.group(6)) == 33.28
