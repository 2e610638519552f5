"""Serial transfer links of the simulated engine: PCIe (host tier) and a cluster's network.

A link carries one transfer at a time: a transfer starts when the link is free (or now, if it is
already) and occupies it for its duration, so transfers queue in the order they are issued.
"""

from __future__ import annotations


class Link:
    __slots__ = ("free_at",)

    def __init__(self) -> None:
        self.free_at = 0.0      # when the last transfer issued so far is done

    def send(self, now: float, seconds: float) -> float:
        """Queue a transfer of `seconds` issued at `now`; returns when it is done."""
        free = self.free_at
        self.free_at = (free if free > now else now) + seconds
        return self.free_at
