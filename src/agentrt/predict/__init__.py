"""Workflow predictors: next-agent distributions over a K-step horizon for PBKV."""
