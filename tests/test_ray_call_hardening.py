"""The Ray ingress's untrusted input: per-tenant cache salts (in the forwarded body, in the block
ids the router and its mirror compare), serve's validation, output limits and malformed bodies
answered with a 400 naming the field. Fake tokenizer and replicas; no Ray cluster."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrt.cluster.routing import RouteRequest
from agentrt.ray.blocks import chain, salt_seed
from agentrt.ray.call import CHAT, COMPLETIONS, MAX_OUTPUT_TOKENS, CallPreparer, tenant_salts
from agentrt.ray.replica_state import ReplicaState
from agentrt.serve.auth import Salts
from agentrt.serve.validate import RequestError
from test_ray_router import BS, FakeReplica, FakeTokenizer, chat, make_router, pending, requires_ray

SECRET = b"a-test-secret-of-32-bytes-length"
pytestmark = pytest.mark.filterwarnings("ignore:Using extra keyword arguments on `Field`")


def preparer() -> CallPreparer:
    salts = Salts(SECRET)
    return CallPreparer(FakeTokenizer(), BS, salts=lambda t: None if t == "default" else salts(t))


def refused(prep: CallPreparer, path: str, body: dict, headers: dict | None = None) -> RequestError:
    with pytest.raises(RequestError) as e:
        prep.prepare(path, body, headers or {})
    assert e.value.status == 400
    return e.value


# ---------------------------------------------------------------------------- tenants
def test_each_named_tenant_gets_its_own_salt_and_block_ids():
    prep = preparer()
    body = chat("shared system prompt of the app", "the same task")
    a = prep.prepare(CHAT, body, {"x-tenant-id": "acme", "x-workflow-id": "w"})
    a2 = prep.prepare(CHAT, body, {"x-tenant-id": "acme", "x-workflow-id": "w2"})
    b = prep.prepare(CHAT, body, {"x-tenant-id": "globex", "x-workflow-id": "w"})
    d = prep.prepare(CHAT, body, {"x-workflow-id": "w"})
    toks = FakeTokenizer().apply_chat_template(body["messages"])
    salts = Salts(SECRET)
    assert a.body["cache_salt"] == salts("acme") == a2.body["cache_salt"]
    assert b.body["cache_salt"] == salts("globex") != salts("acme")
    assert "cache_salt" not in d.body and "cache_salt" not in body     # default: unsalted, as serve
    assert a.hash_ids == chain(toks, BS, salt_seed(salts("acme"))) == a2.hash_ids
    assert d.hash_ids == chain(toks, BS)
    assert not set(a.hash_ids) & set(b.hash_ids) and not set(a.hash_ids) & set(d.hash_ids)
    assert a.route_request().hash_ids == a.hash_ids


def test_default_salts_follow_serve_without_auth(monkeypatch):
    monkeypatch.setenv("AGENTRT_CACHE_SALT_SECRET", SECRET.decode())
    s = tenant_salts()
    assert s("default") is None and s("acme") == Salts(SECRET)("acme")
    prep = CallPreparer(FakeTokenizer(), BS)                   # the ingress's default
    assert prep.prepare(CHAT, chat("s", "u"), {"x-tenant-id": "acme"}).body["cache_salt"] == s("acme")
    monkeypatch.setenv("AGENTRT_CACHE_SALT_SECRET", "short")
    with pytest.raises(Exception, match="16 bytes"):
        tenant_salts()


@pytest.mark.parametrize("field,value", [("cache_salt", "anything"), ("kv_transfer_params", {}),
                                         ("kv_hints", {}), ("vllm_xargs", {"agentrt_tenant": "acme"})])
def test_server_owned_fields_are_refused(field, value):
    e = refused(preparer(), CHAT, chat("s", "u", **{field: value}), {"x-tenant-id": "acme"})
    assert e.param.startswith(field)


def test_mirror_keeps_tenants_apart():
    """vLLM's BlockStored events carry the salt of a chain's first block: the mirror's ids are the
    ingress's for that tenant, and another tenant's identical prompt finds none of them."""
    prep = preparer()
    body = chat("shared system prompt", "secret task")
    a = prep.prepare(CHAT, body, {"x-tenant-id": "acme"})
    b = prep.prepare(CHAT, body, {"x-tenant-id": "globex"})
    toks = FakeTokenizer().apply_chat_template(body["messages"])
    n = len(a.hash_ids)
    st = ReplicaState(block_size=BS, events=True)
    st.apply([{"type": "BlockStored", "block_hashes": list(range(100, 100 + n)), "parent_block_hash": None,
               "token_ids": toks[:n * BS], "block_size": BS, "medium": "GPU",
               "extra_keys": [(a.body["cache_salt"],)] + [None] * (n - 1)}])
    assert st.cached_blocks("acme", a.hash_ids) == n
    assert st.cached_blocks("globex", b.hash_ids) == 0


@requires_ray
def test_a_tenants_probe_is_not_routed_by_another_tenants_blocks():
    async def run():
        prep = preparer()
        reps = [FakeReplica("r0"), FakeReplica("r1"), FakeReplica("r2")]
        r = make_router("prefix", reps, kv_events=False)
        body = chat("shared system prompt of the app", "secret task of tenant A")
        a = prep.prepare(CHAT, body, {"x-tenant-id": "acme", "x-workflow-id": "merger-talks"})
        pa = pending(a)
        home = (await r.choose_replicas(list(r.curr_replicas.values()), pa))[0][0]
        r.on_request_routed(pa, home.replica_id, None)
        r.on_request_completed(home.replica_id, pa.metadata.internal_request_id)
        assert r.states[home.replica_id].cached_blocks("acme", a.hash_ids) == len(a.hash_ids)
        b = prep.prepare(CHAT, body, {"x-tenant-id": "globex", "x-workflow-id": "probe"})
        for s in r.states.values():
            assert s.cached_blocks("globex", b.hash_ids) == 0
        # the same tenant's repeat does follow its own blocks
        a2 = prep.prepare(CHAT, body, {"x-tenant-id": "acme", "x-workflow-id": "again"})
        again = (await r.choose_replicas(list(r.curr_replicas.values()), pending(a2)))[0][0]
        assert again is home
    asyncio.run(run())


# ---------------------------------------------------------------------------- output limits
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [True, False, -1, -10**18, MAX_OUTPUT_TOKENS + 1, 10**15, 1.5, "8", [8]])
def test_bad_output_limits_are_refused_before_routing(field, value):
    prep = preparer()
    e = refused(prep, CHAT, chat("s", "u", **{field: value}))
    assert e.param == field and field in e.message
    assert prep.tracked_workflows() == 0


def test_good_output_limits_reach_the_router():
    prep = preparer()
    assert prep.prepare(CHAT, chat("s", "u"), {}).route_request().output_tokens == 3
    body = chat("s", "u", max_completion_tokens=MAX_OUTPUT_TOKENS)
    assert prep.prepare(CHAT, body, {}).route_request().output_tokens == MAX_OUTPUT_TOKENS
    body = {**chat("s", "u"), "max_tokens": None}
    assert prep.prepare(CHAT, body, {}).route_request().output_tokens == 0


def test_route_request_refuses_negative_output():
    with pytest.raises(ValueError, match="output_tokens"):
        RouteRequest(tenant="t", workflow="w", agent=None, hash_ids=[], prompt_tokens=0, output_tokens=-1)


# ---------------------------------------------------------------------------- malformed bodies
@pytest.mark.parametrize("path,body,param", [
    (COMPLETIONS, {"prompt": [2**70] * 8}, "prompt"),
    (COMPLETIONS, {"prompt": [[1, 2], [2**63]]}, "prompt"),
    (COMPLETIONS, {"prompt": [-1, 2]}, "prompt"),
    (COMPLETIONS, {"prompt": [["x"]]}, "prompt"),
    (COMPLETIONS, {"prompt": [[True, 2]]}, "prompt"),
    (COMPLETIONS, {"prompt": {"a": 1}}, "prompt"),
    (COMPLETIONS, {}, "prompt"),
    (CHAT, {"messages": "hi"}, "messages"),
    (CHAT, {"messages": ["hi"]}, "messages.0"),
    (CHAT, {"messages": [{"role": "user"}]}, "messages"),                 # the template fails
    (CHAT, {}, "messages"),
    (CHAT, {"messages": [{"role": "user", "content": "x"}], "tools": "t"}, "tools"),
    (CHAT, {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]},
     "chat_template_kwargs"),
    (CHAT, {"messages": [{"role": "user", "content": "x"}], "model": 3}, "model"),
])
def test_malformed_bodies_are_400s_naming_the_field(path, body, param):
    prep = preparer()
    assert refused(prep, path, body).param == param
    assert prep.tracked_workflows() == 0


def test_template_kwargs_cannot_change_how_the_router_tokenizes():
    class Tok(FakeTokenizer):
        def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=True, **kw):
            assert tokenize and add_generation_prompt and not kw.keys() & {"tokenize", "conversation"}
            return super().apply_chat_template(messages, tools, add_generation_prompt, tokenize)
    prep = CallPreparer(Tok(), BS, salts=lambda t: None)
    body = chat("s", "u", chat_template_kwargs={"tokenize": False, "add_generation_prompt": False})
    c = prep.prepare(CHAT, body, {})
    assert c.prompt_tokens == len(FakeTokenizer().apply_chat_template(body["messages"]))


@pytest.mark.parametrize("raw,ctype,param", [
    (b"{", "application/json", "body"),
    (b"[1]", "application/json", "body"),
    (b"", "application/json", "body"),
    (b'{"prompt": [1, NaN]}', "application/json", "body"),
    (b'{"prompt": [1180591620717411303424]}', "application/json", "prompt"),   # 2^70: a float to orjson
    (b'{"prompt": [18446744073709551615]}', "application/json", "prompt"),     # 2^64 - 1
    (b'{"prompt": "x"}', "text/plain", None),
])
def test_http_bodies_are_parsed_as_serve_parses_them(raw, ctype, param):
    with pytest.raises(RequestError) as e:
        preparer().prepare_http(COMPLETIONS, raw, ctype, {})
    assert e.value.status == 400 and e.value.param == param


# ---------------------------------------------------------------------------- the ingress route
@requires_ray
@pytest.mark.parametrize("body,status,param", [
    ({"prompt": [2**62, "x"]}, 400, "prompt"),
    ({"prompt": [1, 2, 3], "max_tokens": 10**15}, 400, "max_tokens"),
    ({"prompt": [1, 2, 3], "cache_salt": "mine"}, 400, "cache_salt"),
    ({"prompt": [1, 2, 3, 4, 5], "max_tokens": 2}, 200, None),
])
def test_ingress_answers_400_naming_the_field(body, status, param):
    from starlette.requests import Request

    from agentrt.ray.ingress import Ingress

    class Engine:
        def __init__(self) -> None:
            self.calls = []

        async def _answer(self, call):
            self.calls.append(call)
            return 200, {"ok": True}, "r0"

        def remote(self, call):
            return self._answer(call)

    # the route's logic, without the Serve replica wrapper around the class
    cls = next(c for c in Ingress.__mro__ if "_forward" in vars(c))
    ing = cls.__new__(cls)
    ing.engine, ing.served_name, ing.prep = Engine(), "m", preparer()
    raw = json.dumps(body).encode()

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": COMPLETIONS, "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"x-tenant-id", b"acme")]}
    resp = asyncio.run(ing._forward(COMPLETIONS, Request(scope, receive)))
    out = json.loads(resp.body)
    assert resp.status_code == status
    if status == 400:
        assert out["error"]["param"] == param and out["error"]["code"] == 400 and not ing.engine.calls
    else:
        (call,) = ing.engine.calls
        assert call.body["cache_salt"] == Salts(SECRET)("acme") and call.output_tokens == 2
        assert resp.headers["x-agentrt-prompt-tokens"] == "5"
