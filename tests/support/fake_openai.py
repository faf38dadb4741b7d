"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for fault tests.

It is the network edge of the tests: evalkit reaches it through litellm exactly as it
would reach a provider. Behaviour is a *plan* set over HTTP (``POST /_plan``) or from
Python (:meth:`FakeOpenAI.set_plan`):

    {"default": {"content": "[]", "latency_s": 0.0},
     "rules": [{"match": "substring of the last message",
                "statuses": [500, 429],          # returned on the 1st, 2nd ... attempt of
                "retry_after": 1,                #   that prompt, then success
                "always_status": 400,            # every attempt fails with this status
                "content": "...", "empty": false, "null_with_reasoning": false,
                "finish_reason": "stop", "latency_s": 0.0}]}

Every request is logged (``GET /_log`` or :attr:`FakeOpenAI.log`) with the hash of its
messages, its parameters and the status returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeOpenAI:
    def __init__(self) -> None:
        self.port = _free_port()
        self.plan: dict[str, Any] = {"default": {"content": "[]"}, "rules": []}
        self.log: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.app = self._make_app()
        self._server: uvicorn.Server | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self._thread: threading.Thread | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- control ----------------------------------------------------------------------
    def set_plan(self, plan: dict[str, Any]) -> None:
        with self._lock:
            self.plan = {"default": {"content": "[]"}, "rules": [], **plan}
            self.log = []
            self.attempts = {}
            self.max_in_flight = 0

    def requests_for(self, needle: str) -> list[dict[str, Any]]:
        return [r for r in self.log if needle in r["last"]]

    # ---- behaviour --------------------------------------------------------------------
    def _rule_for(self, text: str) -> dict[str, Any]:
        for rule in self.plan.get("rules", []):
            if rule.get("match") and rule["match"] in text:
                return {**self.plan.get("default", {}), **rule}
        return dict(self.plan.get("default", {}))

    async def _answer(self, body: dict[str, Any], chat: bool) -> JSONResponse:
        if chat:
            messages = body.get("messages") or []
            last = str(messages[-1].get("content", "")) if messages else ""
            key_src = json.dumps(messages, sort_keys=True, ensure_ascii=False)
        else:
            last = str(body.get("prompt", ""))
            key_src = last
        key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
        with self._lock:
            rule = self._rule_for(last if chat else key_src)
            n = self.attempts.get(key, 0)
            self.attempts[key] = n + 1
        status = 200
        statuses = rule.get("statuses") or []
        if rule.get("always_status"):
            status = int(rule["always_status"])
        elif n < len(statuses):
            status = int(statuses[n])
        entry = {
            "key": key, "attempt": n + 1, "status": status, "last": last, "t": time.time(),
            "params": {k: body.get(k) for k in ("temperature", "max_tokens", "top_p", "stop", "seed")},
        }  # fmt: skip
        with self._lock:
            self.log.append(entry)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if rule.get("latency_s"):
                await asyncio.sleep(float(rule["latency_s"]))
        finally:
            with self._lock:
                self.in_flight -= 1
        if status != 200:
            headers = {}
            if rule.get("retry_after") is not None:
                headers["Retry-After"] = str(rule["retry_after"])
            return JSONResponse(
                {"error": {"message": f"scripted {status}", "type": "scripted", "code": status}},
                status_code=status,
                headers=headers,
            )
        content: Any = rule.get("content", "")
        reasoning = None
        if rule.get("empty"):
            content = ""
        if rule.get("null_with_reasoning"):
            content, reasoning = None, "thinking..."
        finish = rule.get("finish_reason", "stop")
        usage = {"prompt_tokens": len(last) // 4, "completion_tokens": len(content or "") // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning is not None:
                message["reasoning_content"] = reasoning
            choice = {"index": 0, "message": message, "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish, "logprobs": None}
            obj = "text_completion"
        return JSONResponse(
            {"id": f"fake-{key}-{n}", "object": obj, "created": int(time.time()), "model": body.get("model", "fake"),
             "choices": [choice], "usage": usage}  # fmt: skip
        )

    def _make_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            return await self._answer(await request.json(), chat=True)

        @app.post("/v1/completions")
        async def completions(request: Request) -> JSONResponse:
            return await self._answer(await request.json(), chat=False)

        @app.post("/_plan")
        async def plan(request: Request) -> dict[str, str]:
            self.set_plan(await request.json())
            return {"ok": "plan set"}

        @app.get("/_log")
        async def get_log() -> list[dict[str, Any]]:
            return self.log

        @app.get("/_stats")
        async def stats() -> dict[str, Any]:
            return {"requests": len(self.log), "max_in_flight": self.max_in_flight}

        return app

    # ---- lifecycle --------------------------------------------------------------------
    def start(self) -> "FakeOpenAI":
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.time() + 20
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def main() -> None:  # pragma: no cover - used by subprocess tests
    """Run standalone: ``python tests/support/fake_openai.py PORT_FILE`` writes its port."""
    import sys

    server = FakeOpenAI()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            fh.write(str(server.port))
    config = uvicorn.Config(server.app, host="127.0.0.1", port=server.port, log_level="error", lifespan="off", backlog=4096)
    uvicorn.Server(config).run()


if __name__ == "__main__":  # pragma: no cover
    main()
