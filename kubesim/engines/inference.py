"""The inference endpoints of a simulated engine: OpenAI completions and chat, SGLang's /generate, streaming.

A mixin of `kubesim.engines.server.EngineWorkload`: requests are tokenized, submitted to the engine core
and answered (or streamed as server-sent events) when the core finishes them.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from aiohttp import web

from kubesim.engines.core import EngineCore
from kubesim.engines.openai import ApiError, parse_openai
from kubesim.engines.request import Request
from kubesim.engines.tokenizer import generated_words, tokenize


class InferenceHandlers:
    """`/v1/completions`, `/v1/chat/completions` and `/generate` of EngineWorkload."""

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _body(self, request: web.Request) -> dict | web.Response:
        """The JSON object of a generation request, or the response refusing it (loading, bad JSON)."""
        starting = self._starting()
        if starting is not None:
            return starting
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error(400, "Invalid JSON body")
        if not isinstance(body, dict):
            return self._error(400, "The request body must be a JSON object")
        return body

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        try:
            tokens, max_tokens, ignore_eos = parse_openai(body, chat, self.spec, self.loras)
        except ApiError as e:
            return self._error(e.status, e.message, e.kind, e.param)
        spec = self.spec
        kv_params = body.get("kv_transfer_params") or {}
        remote_kv = False
        if spec.pd_role == "decode":
            remote_kv = bool(kv_params.get("do_remote_prefill") or body.get("bootstrap_room") is not None)
            if spec.kind == "sglang" and not remote_kv:
                return self._error(400, "Disaggregated decode requires bootstrap_host and bootstrap_room.")
        if spec.pd_role == "prefill" and spec.kind == "sglang":
            max_tokens = 1
        full = self._queue_full(len(tokens))
        if full is not None:
            return full
        stream = bool(body.get("stream", False))
        req = self.new_request(tokens, max_tokens, ignore_eos=ignore_eos, stream=stream, remote_kv=remote_kv)
        req.lora = body.get("model") if body.get("model") in self.loras else None
        core = self.submit(req)
        model = body.get("model") or spec.served_names[0]
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        if stream:
            return await self._stream(request, req, core, rid, model, created, chat, body)
        try:
            await req.done
        except asyncio.CancelledError:
            core.abort(req)
            raise
        text = "".join(generated_words(self.seed, req.request_id, req.generated))
        usage = self._usage(req)
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": req.finish_reason,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason}
        out = {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
        if spec.pd_role == "prefill" and spec.kind == "vllm":
            out["kv_transfer_params"] = {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_engine_id": f"sim-{self.port}",
                "remote_host": "127.0.0.1",
                "remote_port": self.port,
                "remote_block_ids": [],
                "num_prompt_tokens": req.prompt_len,
            }
        return web.json_response(out)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's native API: {"text" | "input_ids", "sampling_params": {"max_new_tokens", ...}, "stream"}."""
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        params = body.get("sampling_params") or {}
        tokens = body.get("input_ids") or tokenize(body.get("text") or "")
        if not tokens:
            return self._error(400, "Either text or input_ids should be provided.")
        max_new = params.get("max_new_tokens", 128)
        if not isinstance(max_new, int) or max_new < 1:
            return self._error(400, f"max_new_tokens must be a positive integer, got {max_new}.")
        limit = self.spec.core.max_model_len
        if len(tokens) + max_new > limit:
            return self._error(
                400, f"Requested token count exceeds the model's maximum context length of {limit} tokens."
            )
        full = self._queue_full(len(tokens))
        if full is not None:
            return full
        stream = bool(body.get("stream", False))
        remote_kv = self.spec.pd_role == "decode"
        if self.spec.pd_role == "prefill":
            max_new = 1
        req = self.new_request(
            tokens, max_new, ignore_eos=bool(params.get("ignore_eos")), stream=stream, remote_kv=remote_kv
        )
        core = self.submit(req)
        words = generated_words(self.seed, req.request_id, req.output_len)

        def meta() -> dict:
            finish = None
            if req.finish_reason == "length":
                finish = {"type": "length", "length": req.generated}
            elif req.finish_reason:
                finish = {"type": req.finish_reason, "matched": None}
            return {
                "id": req.request_id,
                "finish_reason": finish,
                "prompt_tokens": req.prompt_len,
                "completion_tokens": req.generated,
                "cached_tokens": max(req.cached_tokens, 0),
            }

        if not stream:
            await req.done
            return web.json_response({"text": "".join(words[: req.generated]), "meta_info": meta()})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            while (n := await req.queue.get()) is not None:
                payload = {"text": "".join(words[:n]), "meta_info": meta()}
                await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            core.abort(req)
            raise
        await resp.write_eof()
        return resp

    @staticmethod
    def _usage(req: Request) -> dict:
        usage = {
            "prompt_tokens": req.prompt_len,
            "completion_tokens": req.generated,
            "total_tokens": req.prompt_len + req.generated,
        }
        if req.cached_tokens > 0:
            usage["prompt_tokens_details"] = {"cached_tokens": req.cached_tokens}
        return usage

    async def _stream(
        self, request, req: Request, core: EngineCore, rid: str, model: str, created: int, chat: bool, body: dict
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        words = generated_words(self.seed, req.request_id, req.output_len)

        def chunk(delta: str | None, finish: str | None, first: bool = False) -> bytes:
            if chat:
                d = {"role": "assistant", "content": ""} if first else ({"content": delta} if delta else {})
                choice = {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
            payload = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
            if include_usage:
                payload["usage"] = None
            return b"data: " + json.dumps(payload).encode() + b"\n\n"

        try:
            if chat:
                await resp.write(chunk(None, None, first=True))
            sent = 0
            while True:
                n = await req.queue.get()
                if n is None:
                    break
                pieces = "".join(words[sent:n])
                sent = n
                await resp.write(chunk(pieces, None))
            await resp.write(chunk(None, req.finish_reason))
            if include_usage:
                usage = self._usage(req)
                payload = {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
                await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            core.abort(req)
            raise
        await resp.write_eof()
        return resp
