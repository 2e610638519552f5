"""Max-min fair division of a pool by weight (water-filling), for `fair`'s running-memory shares.

Model: the pool is divided among tenants by weight; a tenant that needs less than its weighted
level keeps what it needs, and what it leaves is split by weight among the others, repeatedly
(the classic water-filling). `share_of_unbounded` answers the question admission asks: how much
may one tenant, whose demand is taken as unbounded, hold while the others hold their demands?
With every other demand at least its weighted share this is the static split `pool * w / total`;
tenants that need almost nothing (idle ones, or names invented to dilute the shares) then do not
shrink it. Pure arithmetic: O(n log n) in the other tenants, no state, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable


def share_of_unbounded(pool: float, weight: float, others: Iterable[tuple[float, float]]) -> float:
    """The max-min share of a tenant of `weight` with unbounded demand, beside `others`
    ((demand, weight) pairs, weights > 0): at least `pool * weight / total weight`."""
    rest = float(pool)
    total = weight
    items = []
    for demand, w in others:
        total += w
        items.append((max(0.0, demand) / w, demand, w))
    items.sort()
    for per_weight, demand, w in items:
        # the smallest remaining demand per weight is under the level: it keeps its demand and
        # the others split what is left; else no later one is under it either
        if per_weight * total > rest:
            break
        rest -= max(0.0, demand)
        total -= w
    return rest * weight / total
