"""`sched/peaks.py`: a tenant's running-memory peak over its open workflows' lifetime."""

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.sched.peaks import RunningPeaks


def test_the_peak_is_the_largest_note_since_the_oldest_open_workflow():
    p = RunningPeaks()
    assert p.get("t") == 0 and "t" not in p
    p.opened("t", "w1")
    p.note("t", 30)
    p.opened("t", "w2")
    p.note("t", 10)
    p.note("t", 20)
    assert p.get("t") == 30
    p.closed("t", "w1")          # the note of 30 predates w2: forgotten; 20 after it stays
    assert p.get("t") == 20
    p.closed("t", "w2")
    assert "t" not in p and p.get("t") == 0 and len(p) == 0


def test_reopened_and_unknown_workflows_and_notes_without_one():
    p = RunningPeaks()
    p.note("t", 50)              # nothing open: nothing kept
    assert len(p) == 0
    p.opened("t", "w")
    p.note("t", 5)
    p.opened("t", "w")           # a later call of an open workflow keeps its start
    p.closed("t", "other")       # unknown: no change
    p.closed("u", "w")
    assert p.get("t") == 5 and len(p) == 2


def test_tenants_are_separate():
    p = RunningPeaks()
    p.opened("a", "w")
    p.opened("b", "w")           # same workflow id, another tenant
    p.note("a", 40)
    p.note("b", 7)
    p.closed("b", "w")
    assert p.get("a") == 40 and p.get("b") == 0


ops = st.lists(st.tuples(st.sampled_from(["open", "close", "note"]), st.integers(0, 4), st.integers(0, 60)),
               max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_matches_a_recount_over_the_history(history):
    """The peak equals the largest note made since the oldest open workflow's start, recounted
    from the whole history, and the queue never holds more than the notes it could need."""
    p = RunningPeaks()
    t, open_at, notes = 0, {}, []
    for op, w, blocks in history:
        if op == "open":
            p.opened("x", f"w{w}")
            if f"w{w}" not in open_at:
                t += 1
                open_at[f"w{w}"] = t
        elif op == "close":
            p.closed("x", f"w{w}")
            open_at.pop(f"w{w}", None)
            if not open_at:
                notes.clear()
        else:
            p.note("x", blocks)
            if open_at:
                t += 1
                notes.append((t, blocks))
        oldest = min(open_at.values(), default=None)
        want = max((b for s, b in notes if oldest is not None and s >= oldest), default=0)
        assert p.get("x") == want
        assert len(p) <= len(open_at) + len(notes)
