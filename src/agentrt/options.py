"""Option values, checked before any work starts.

`--set POLICY.OPTION=VALUE` strings turned into Python values and checked against the options the
policy takes; scheduler options; the files a command reads and writes. Every check raises
`AgentrtError` naming the option as the user wrote it: `--gpu-blocks` on the command line,
`gpu_blocks` from Python (`flag`).
"""

from __future__ import annotations

import inspect
import math
import os
from pathlib import Path

from agentrt.errors import AgentrtError


def flag(name: str, cli: bool) -> str:
    """How an error names option `name` (a Python keyword): `--gpu-blocks` or `gpu_blocks`."""
    return "--" + name.replace("_", "-") if cli else name


def positive(value: float | None, name: str, cli: bool, allow_zero: bool = False) -> None:
    """None passes; otherwise a finite number > 0 (>= 0 with `allow_zero`)."""
    if value is None:
        return
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise AgentrtError(f"{flag(name, cli)} must be {'>=' if allow_zero else '>'} 0, got {value}")


def parse_value(text: str):
    """'true'/'false' -> bool, then int, then float, else the string itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def class_parameters(cls: type):
    """The keyword parameters of `cls`'s constructors (agentrt.registry.class_parameters)."""
    from agentrt.registry import class_parameters as params
    return params(cls)


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


def input_file(path: str | os.PathLike, what: str) -> Path:
    """A file to read: it exists and is no directory."""
    p = Path(path)
    if p.is_dir():
        raise AgentrtError(f"{what} {p}: is a directory, not a file")
    if not p.exists():
        raise AgentrtError(f"{what} {p}: no such file")
    return p


def output_file(path: str | os.PathLike, what: str, suffixes: tuple[str, ...] = ()) -> Path:
    """A file to write (its folders are created): not a directory, under a writable folder, with
    one of `suffixes` (lower case, with the dot) when given."""
    try:
        return _output_file(Path(path), str(path), what, suffixes)
    except OSError as e:             # a name too long, a path the OS refuses to look up
        raise AgentrtError(f"{what} {path}: cannot be written ({e.strerror or e})") from None


def _output_file(p: Path, path: str, what: str, suffixes: tuple[str, ...]) -> Path:
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        raise AgentrtError(f"{what} {p}: is a directory; give a file name")
    if suffixes and p.suffix.lower() not in suffixes:
        want = suffixes[0] if len(suffixes) == 1 else f"one of {', '.join(suffixes)}"
        got = f"not '{p.suffix}'" if p.suffix else "it has none"
        raise AgentrtError(f"{what} {p}: the file name must end in {want} ({got})")
    parent = next((d for d in p.absolute().parents if d.exists()), None)
    if parent is not None and not parent.is_dir():
        raise AgentrtError(f"{what} {p}: {parent} is a file, not a directory")
    if parent is not None and not os.access(parent, os.W_OK | os.X_OK):
        raise AgentrtError(f"{what} {p}: cannot write under {parent} (permission denied)")
    if parent is not None and parent == p.absolute().parent and not os.path.lexists(p):
        # what permissions do not tell (a name too long, a file system that refuses files, as
        # /proc): try it, and leave nothing behind
        try:
            with open(p, "x"):
                pass
        except OSError as e:
            raise AgentrtError(f"{what} {p}: cannot be written ({e.strerror or e})") from None
        p.unlink(missing_ok=True)
    return p
