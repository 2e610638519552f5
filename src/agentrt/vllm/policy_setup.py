"""The policy the runtime hosted in vLLM's scheduler process runs (`hosted.py`), built from the
connector's settings.

In order: the configured plugin modules are imported (they register policies by name); with
workers in separate processes (vLLM's "mp" backend) torch gets one intra-op thread (a policy's
predictor then does not compete with the workers' compute threads for the cores); the policy is
made by name with its options, and trained on `train_trace` when it needs training (a policy
that needs none ignores the file). Errors propagate: the connector reports them at start-up.
"""

from __future__ import annotations

import importlib
import sys

from agentrt.runtime.policy import Policy
from agentrt.vllm.config import ConnectorConfig


def one_torch_thread() -> None:
    """One intra-op thread for torch, if torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(1)
        except Exception:  # noqa: BLE001
            pass


def hosted_policy(cfg: ConnectorConfig, separate_workers: bool = False) -> Policy:
    from agentrt.policies.registry import make_policy
    for mod in cfg.plugins:
        importlib.import_module(mod)
    if separate_workers:
        one_torch_thread()
    policy = make_policy(cfg.policy, **cfg.policy_options())
    if cfg.train_trace and policy.needs_training:
        from agentrt.trace.reader import TraceReader
        reader = TraceReader(cfg.train_trace)
        policy.train(iter(reader), reader.header.block_size)
    return policy
