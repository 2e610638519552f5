"""The two-tier radix KV cache."""

from agentrt.cache.block import GONE, GPU, HOST, Block
from agentrt.cache.lease import Lease
from agentrt.cache.radix import RadixKVCache

__all__ = ["Block", "GONE", "GPU", "HOST", "Lease", "RadixKVCache"]
