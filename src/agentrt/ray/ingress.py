"""The Ray Serve ingress: OpenAI-compatible routes in front of the vLLM deployment's handle.

`Ingress` (a FastAPI app, one replica by default) parses each body, resolves the call's identity
and tokenizes it into an `AgentCall` (`call.py`), and calls the vLLM deployment's handle, whose
request router (`router.py`) picks the replica. Bodies are parsed and checked as `agentrt serve`
checks them (`call.py`); a bad one gets an OpenAI-style 400 naming the field. Each named tenant's
prompts go to vLLM under its own `cache_salt`, derived from `cache_salt_secret_file` (else
$AGENTRT_CACHE_SALT_SECRET, else a secret generated at start); there is no authentication, so
the tenant is whatever the request names (docs/ray.md). The reply carries the replica's name in
`x-agentrt-replica`, the workflow key (URL-quoted) and the prompt's token count as the router saw
them. Streaming goes through the handle as a Serve streaming call (`VLLMReplica.stream`): the
replica yields vLLM's status first, then server-sent-event bytes as they arrive; an upstream
error (status not 200) is returned whole, as JSON, and a client that disconnects cancels the
streaming call.
`GET /agentrt/router` returns the router's per-replica mirror figures. See `deploy.py` for the
application around it.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from agentrt.ray.call import CHAT, COMPLETIONS, AgentCall, CallPreparer, tenant_salts
from agentrt.serve.validate import RequestError


# defined before the ingress class: Serve pickles its routes when the class is decorated
def _headers(call: AgentCall, replica: str) -> dict:
    return {"x-agentrt-replica": replica, "x-agentrt-workflow": quote(call.workflow, safe=""),
            "x-agentrt-prompt-tokens": str(call.prompt_tokens)}


api = FastAPI()


@serve.ingress(api)
class Ingress:
    def __init__(self, engine: DeploymentHandle, tokenizer: str, block_size: int, served_name: str,
                 cache_salt_secret_file: str | None = None) -> None:
        self.engine = engine
        self.served_name = served_name
        self.prep = CallPreparer(tokenizer, block_size, salts=tenant_salts(cache_salt_secret_file))
        self.prep.tokenizer     # load it now, not on the first request

    @api.post(CHAT)
    async def chat(self, request: Request) -> JSONResponse:
        return await self._forward(CHAT, request)

    @api.post(COMPLETIONS)
    async def completions(self, request: Request) -> JSONResponse:
        return await self._forward(COMPLETIONS, request)

    @api.get("/v1/models")
    async def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.served_name, "object": "model", "owned_by": "agentrt"}]}

    async def _forward(self, path: str, request: Request) -> JSONResponse:
        try:
            call = self.prep.prepare_http(path, await request.body(), request.headers.get("content-type"),
                                          {k.lower(): v for k, v in request.headers.items()})
        except RequestError as e:
            return JSONResponse(e.body(), status_code=e.status)
        if call.body.get("stream") is True:
            return await self._stream(call)
        status, payload, replica = await self.engine.remote(call)
        return JSONResponse(payload, status_code=status, headers=_headers(call, replica))

    async def _stream(self, call: AgentCall):
        gen = self.engine.options(stream=True, method_name="stream").remote(call)
        try:
            status, replica = await gen.__anext__()
        except BaseException:
            gen.cancel()
            raise
        if status != 200:
            data = b"".join([chunk async for chunk in gen])
            try:
                payload = json.loads(data)
            except ValueError:
                payload = {"error": {"message": data.decode(errors="replace"), "type": "UpstreamError",
                                     "code": status}}
            return JSONResponse(payload, status_code=status, headers=_headers(call, replica))

        async def relay():
            done = False
            try:
                async for chunk in gen:
                    yield chunk
                done = True
            finally:
                if not done:            # the client went away: stop the replica reading vLLM
                    gen.cancel()
        return StreamingResponse(relay(), media_type="text/event-stream", headers=_headers(call, replica))

    @api.get("/agentrt/router")
    async def router_stats(self) -> list:
        """The mirror and router figures of this process's agentrt request routers."""
        from agentrt.ray.router import LIVE
        return [r.stats() for r in list(LIVE)]
