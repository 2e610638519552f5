"""Eviction policies and the registry that names them."""
