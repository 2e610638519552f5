"""What a replay records beside its metrics, for the bounds and the oracle (`agentrt.bounds`).

- `stream`: block references in order, (tenant, hash ids, input length, is-prompt) per prompt at
  admission and per output at the finish;
- `holds`: (stream position, request key, +1 held / -1 released, tenant, hash ids): when a user
  call's prompt blocks were held in GPU memory (`bounds.held`);
- `admitted`: (workflow, call index) of user calls in admission order: the oracle's reference.
Each is None when not recorded. A cluster replaces them after the simulator is built (with its
shared, replica-tagged records), so the engine's parts read them here at the time of use.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Records:
    stream: list | None = None
    holds: list | None = None
    admitted: list[tuple[str, int]] | None = None
