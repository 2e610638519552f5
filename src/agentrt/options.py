"""Component options, checked before any work starts.

`--set POLICY.OPTION=VALUE` strings turned into Python values and checked against the options the
policy takes; router options; scheduler options. Every check raises `AgentrtError` naming the
option as the user wrote it (`checks.flag`). The plain value and path checks every layer uses are
in `agentrt.checks`.
"""

from __future__ import annotations

from agentrt.checks import flag, parse_value, positive
from agentrt.errors import AgentrtError


def policy_option_names(name: str) -> list[str] | None:
    """The keyword options policy `name` takes, `seed` aside (the bench sets it), in signature
    order; None when they cannot be told (a plain factory, or options passed on to no class)."""
    from agentrt.policies.registry import POLICIES
    return POLICIES.option_names(name)


def policy_flag_names(name: str) -> set[str]:
    """The options of policy `name` that default to true or false: they take a bool and nothing else."""
    from agentrt.policies.registry import POLICIES
    return POLICIES.flag_names(name)


def check_policy_options(policy_options: dict, policies: list[str], cli: bool) -> None:
    """Every {policy: {option: value}} names a policy being run and an option that policy takes."""
    for pol, opts in policy_options.items():
        where = "--set" if cli else "policy_options"
        if pol not in policies:
            raise AgentrtError(f"{where} {pol}: policy '{pol}' is not among the policies run "
                               f"({', '.join(policies)})")
        valid = policy_option_names(pol)
        if valid is None:
            continue
        for opt in opts:
            if opt not in valid:
                seed = f" (the seed is {flag('seed', cli)})" if opt == "seed" else ""
                listed = ", ".join(valid) if valid else "none"
                raise AgentrtError(f"{where} {pol}.{opt}: policy '{pol}' has no option '{opt}'"
                                   f"{seed}; valid options of {pol}: {listed}")


def parse_policy_options(items: list[str], policies: list[str]) -> dict:
    """`--set policy.option=value` items -> {policy: {option: value}}, checked."""
    out: dict = {}
    for item in items:
        key, eq, val = item.partition("=")
        pol, dot, opt = key.partition(".")
        if not eq or not dot or not pol or not opt:
            raise AgentrtError(f"--set {item!r}: expected POLICY.OPTION=VALUE")
        out.setdefault(pol, {})[opt] = parse_value(val)
    check_policy_options(out, policies, cli=True)
    return out


KINDS = ("scheduler", "router")     # `--set KIND.OPTION=VALUE` keys that are no policy's name


def split_set(items: list[str]) -> tuple[list[str], list[str], list[str]]:
    """`--set` items -> (policy items, scheduler OPTION=VALUE items, router OPTION=VALUE items):
    one syntax for every kind of component (`--set pbkv-ta.online=false`,
    `--set scheduler.max_hold_s=60`, `--set router.spread=true`)."""
    pol: list[str] = []
    kinds: dict[str, list[str]] = {k: [] for k in KINDS}
    for item in items:
        head, dot, rest = item.partition(".")
        if dot and head in kinds:
            kinds[head].append(rest)
        else:
            pol.append(item)
    return pol, kinds["scheduler"], kinds["router"]


def parse_component_options(items: list[str], kind: str, name: str, flag_name: str = "--set") -> dict:
    """OPTION=VALUE items for the run's `kind` component `name` -> its keyword options, checked
    against its constructor (`agentrt.registry`) and by building it once."""
    from agentrt.cluster.registry import ROUTERS
    from agentrt.sched.registry import SCHEDULERS
    reg = {"scheduler": SCHEDULERS, "router": ROUTERS}[kind]
    reg.check(name)
    known = reg.option_names(name)
    out: dict = {}
    for item in items:
        key, eq, val = item.partition("=")
        shown = f"--set {kind}.{item}" if flag_name == "--set" else f"{flag_name} {item!r}"
        if not eq or not key:
            raise AgentrtError(f"{shown}: expected OPTION=VALUE (an option of {kind} {name})")
        if known is not None and key not in known:
            raise AgentrtError(f"{shown}: {kind} '{name}' has no option {key!r}; it has: "
                               + (", ".join(known) or "none"))
        out[key] = parse_value(val)
    reg.make(name, **out)              # a bad value (or option): the component's own message
    return out


def parse_router_options(items: list[str], router: str) -> dict:
    """`--router-set option=value` items -> the router's keyword options, checked by building it."""
    return parse_component_options(items, "router", router, "--router-set")


def scheduler_options(name: str, max_wait: float | None, tenant_weights: str | None,
                      max_hold: float | None = None, shared_chunk_tokens: int | None = None,
                      prefix_hold: bool = True, items: list[str] | None = None) -> dict:
    """Check `--scheduler` and its options before any replay; the scheduler's keyword options:
    `--set scheduler.OPTION=VALUE` items, and the flags that are their aliases (`--max-wait`,
    `--max-hold`, `--tenant-weights`, `--shared-chunk-tokens`, `--no-prefix-hold`), which win."""
    from agentrt.sched.registry import make_scheduler
    opts: dict = parse_component_options(items, "scheduler", name) if items else {}
    if max_wait is not None:
        positive(max_wait, "max_wait", cli=True)
        opts["max_wait_s"] = max_wait
    if max_hold is not None:
        positive(max_hold, "max_hold", cli=True)
        opts["max_hold_s"] = max_hold
    if tenant_weights is not None:
        if name != "fair":
            raise AgentrtError("--tenant-weights applies to --scheduler fair only")
        opts["weights"] = tenant_weights
    if shared_chunk_tokens is not None:
        if name != "fair":
            raise AgentrtError("--shared-chunk-tokens applies to --scheduler fair only")
        if shared_chunk_tokens < 0:
            raise AgentrtError(f"--shared-chunk-tokens must be >= 0 (0: no cap), got {shared_chunk_tokens}")
        opts["shared_chunk_tokens"] = shared_chunk_tokens
    if not prefix_hold:
        if name != "agent":
            raise AgentrtError("--no-prefix-hold applies to --scheduler agent only")
        opts["prefix_hold"] = False
    make_scheduler(name, **opts)
    return opts
