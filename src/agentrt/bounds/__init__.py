"""Offline bounds: Belady MIN with bypass and the infinite cache."""
