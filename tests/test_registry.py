"""One registry for every kind of component (`agentrt.registry`): names, descriptions, options read
from the constructor, one `--set KIND.OPTION=VALUE` syntax on the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.cluster.registry import ROUTERS
from agentrt.errors import AgentrtError
from agentrt.policies.registry import POLICIES, register
from agentrt.sched.registry import SCHEDULERS


@pytest.mark.parametrize("reg,name", [(POLICIES, "pbkv-ta"), (SCHEDULERS, "agent"), (ROUTERS, "prefix")])
def test_every_kind_lists_describes_and_builds_alike(reg, name):
    assert name in reg.names() and reg.describe(name)
    opts = reg.option_names(name)
    assert opts and "seed" not in opts
    with pytest.raises(AgentrtError, match=f"bad option for {reg.kind} '{name}': no option 'nope'"):
        reg.make(name, nope=1)
    with pytest.raises(AgentrtError, match=f"unknown {reg.kind}"):
        reg.check("no-such-thing")
    assert "=" in reg.options_text(name)


def test_a_boolean_option_takes_a_bool_only():
    flag = sorted(SCHEDULERS.flag_names("agent"))[0]
    with pytest.raises(AgentrtError, match=f"{flag} must be true or false"):
        SCHEDULERS.make("agent", **{flag: "false"})


@pytest.mark.parametrize("name", ["scheduler", "router", "belady"])
def test_reserved_names_are_no_policy_names(name):
    from agentrt.policies.lru import LRUPolicy
    with pytest.raises(AgentrtError):
        register(name, LRUPolicy)


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", "--quiet", "--workload", "team",
                           "--workflows", "6", "--policies", "lru", *args], capture_output=True, text=True,
                          timeout=300)


def test_one_option_syntax_for_schedulers_and_routers(tmp_path):
    out = tmp_path / "r.json"
    p = _bench("--scheduler", "agent", "--set", "scheduler.max_hold_s=30", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["config"]["scheduler_options"]["max_hold_s"] == 30
    p = _bench("--scheduler", "agent", "--set", "scheduler.max_hold_s=30", "--max-hold", "45", "--json", str(out))
    assert json.loads(out.read_text())["config"]["scheduler_options"]["max_hold_s"] == 45   # the flag wins
    p = _bench("--scheduler", "las", "--set", "scheduler.window=4")
    assert p.returncode == 2 and "--set scheduler.window=4: scheduler 'las' has no option 'window'" in p.stderr
    p = _bench("--replicas", "2", "--concurrency", "4", "--set", "router.spread=true", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["config"]["router_options"] == {"spread": True}


def test_listing_with_options():
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "schedulers", "--options"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "options: max_wait_s=60.0" in p.stdout
