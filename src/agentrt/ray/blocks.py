"""Token block ids shared by the Ray router's requests and its mirror of vLLM's KV events.

Model
- vLLM's prefix cache holds full blocks of `block_size` tokens under chained hashes (a block's
  hash covers its parent's hash, its own tokens and extra keys such as the `cache_salt`). The
  router cannot reproduce vLLM's hashes (their seed and function are the engine's), but vLLM's
  `BlockStored` events carry each block's token ids and its parent's hash. So both sides compute
  one chain of their own over token ids: the ingress over the tokenized prompt (`chain`), the
  mirror over the stored blocks (`block_hash` of the parent's id and the tokens). Equal ids mean
  equal prefixes, exactly as in vLLM.
- The chain starts from the request's `cache_salt` (`salt_seed`; 0 without a salt), so prompts
  under two salts are different blocks here as they are in vLLM.
- Ids are 63-bit ints (blake2b), the width `RouteRequest.hash_ids` uses elsewhere in agentrt.
Not covered: LoRA adapters and multimodal inputs (their extra keys are not hashed here).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    """The id of a block of `tokens` whose previous block has id `parent`."""
    data = parent.to_bytes(8, "little") + array("q", tokens).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def salt_seed(salt: str | None) -> int:
    """The first link of the chain of prompts sent with `cache_salt` = `salt` (0: no salt)."""
    if not salt:
        return 0
    digest = hashlib.blake2b(b"salt\x1e" + salt.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


def chain(token_ids: Sequence[int], block_size: int, seed: int = 0) -> list[int]:
    """Ids of the full blocks of a prompt (a trailing partial block is not cached by vLLM)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    out: list[int] = []
    prev = seed
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        prev = block_hash(prev, token_ids[start:start + block_size])
        out.append(prev)
    return out
