"""What a pod's container runs: the engines' simulated workloads when they claim the image, else generic.

`resolve(ctx, workload_for)` asks the engines' factory (`kubesim.engines.workload_for`, which the cluster
assembly hands to the kubelet) and falls back to `GenericWorkload`, which serves `/health` (and echoes
other requests, streaming `/stream` as server-sent events) on a real loopback port, so the kubelet
and the API server's proxies treat every pod alike. `PUT /health?code=503` makes its health
endpoints answer that code (to exercise readiness and liveness probes); `/metrics` reports
`http_requests_total` and `http_requests_in_flight` (a `/stream` is in flight until it ends).
A shell command line that ends in `exit N` (`sh -c "echo boom; exit 1"`) prints its echoes and
exits, which is how a crash loop is demonstrated. A Job's pod (label `batch.kubernetes.io/job-name`)
without such a command exits 0 at once: kubesim cannot run the image's program, so it succeeds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

from aiohttp import web

from kubesim.workload import PodContext, Workload, WorkloadExit, WorkloadFactory

log = logging.getLogger(__name__)

GENERIC_STARTUP_SECONDS = 1.5
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set on a Job's pods (kubesim/cluster/controllers/job.py)
HEALTH_PATHS = ("/health", "/healthz", "/ready", "/readyz", "/livez")
_EXIT = re.compile(r"(?:^|[;&|\s])exit\s+(\d+)")
_ECHO = re.compile(r"echo\s+([^;&|]*)")


def resolve(ctx: PodContext, workload_for: WorkloadFactory | None) -> Workload:
    """The workload for a container: the engines' choice when they make one, else generic."""
    if workload_for is not None:
        workload = workload_for(ctx)
        if workload is not None:
            return workload
    return GenericWorkload(ctx)


class GenericWorkload:
    """Any image kubesim does not simulate: ready quickly, answers `/health`, echoes everything else."""

    def __init__(self, ctx: PodContext):
        self.ctx = ctx
        self._lines: list[str] = []
        self._runner: web.AppRunner | None = None
        self.health_code = 200
        self.requests_total = 0
        self.in_flight = 0

    def startup_seconds(self) -> float:
        return GENERIC_STARTUP_SECONDS

    def logs(self) -> list[str]:
        return list(self._lines)

    def _log(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._lines.append(f"{stamp} {line}")
        del self._lines[:-1000]

    def _shell_exit(self) -> WorkloadExit | None:
        """A shell command line such as `sh -c "echo starting; exit 3"` prints its echoes and exits."""
        words = [*(self.ctx.container.get("command") or []), *(self.ctx.container.get("args") or [])]
        script = " ".join(str(word) for word in words)
        match = _EXIT.search(script)
        if match is None and JOB_NAME_LABEL in self.ctx.labels:
            # A Job's pod runs to completion: kubesim cannot run the image's program, so it succeeds.
            image = self.ctx.container.get("image", "")
            return WorkloadExit("Completed", exit_code=0, logs=[f"{image} ran to completion (simulated)"])
        if match is None:
            return None
        printed = [echo.strip().strip("'\"") for echo in _ECHO.findall(script[: match.start()])]
        code = int(match.group(1))
        return WorkloadExit(f"exit status {code}", exit_code=code, logs=printed)

    async def start(self) -> int:
        exit_ = self._shell_exit()
        if exit_ is not None:
            raise exit_
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/stream", self._stream)
        app.router.add_route("*", "/{path:.*}", self._echo)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        image = self.ctx.container.get("image", "")
        self._log(f"starting {image} in pod {self.ctx.namespace}/{self.ctx.pod_name}")
        self._log(f"listening on 127.0.0.1:{port}")
        return port

    async def stop(self) -> None:
        if self._runner is not None:
            self._log("received SIGTERM, shutting down")
            await self._runner.cleanup()
            self._runner = None

    def probe(self, method: str, path: str) -> int:
        """The status an HTTP probe of `path` gets, answered in-process: what `_echo` answers over HTTP,
        without a loopback round trip for every container every period (the kubelet's main cost at scale)."""
        self.requests_total += 1
        self._log(f'"{method} {path}" {self.health_code if path in HEALTH_PATHS else 200}')
        return self.health_code if path in HEALTH_PATHS else 200

    async def _metrics(self, request: web.Request) -> web.Response:
        """Prometheus text: requests served and in flight (what an HPA on a Pods metric can follow)."""
        lines = [
            "# HELP http_requests_total Requests served by this container.",
            "# TYPE http_requests_total counter",
            f"http_requests_total {self.requests_total}",
            "# HELP http_requests_in_flight Requests being served now.",
            "# TYPE http_requests_in_flight gauge",
            f"http_requests_in_flight {self.in_flight}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")

    async def _echo(self, request: web.Request) -> web.Response:
        self.requests_total += 1
        path = "/" + request.match_info["path"]
        self._log(f'"{request.method} {request.path_qs}" 200')
        if path in HEALTH_PATHS:
            if request.method == "PUT" and request.query.get("code", "").isdigit():
                # Tests and demos make a pod unhealthy (or healthy again) through the pod proxy.
                self.health_code = int(request.query["code"])
                self._log(f"health now answers {self.health_code}")
            return web.Response(text="ok" if self.health_code < 400 else "unhealthy", status=self.health_code)
        body = await request.read()
        return web.json_response({
            "pod": self.ctx.pod_name,
            "namespace": self.ctx.namespace,
            "method": request.method,
            "path": path,
            "query": dict(request.query),
            "body": body.decode("utf-8", "replace"),
            "headers": {k: v for k, v in request.headers.items() if k.lower().startswith("x-")},
        })

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events, one every `interval` seconds, `n` of them: to observe streaming proxies."""
        count = int(request.query.get("n", "5"))
        interval = float(request.query.get("interval", "0.2"))
        self._log(f'"{request.method} {request.path_qs}" 200 (stream)')
        self.requests_total += 1
        self.in_flight += 1
        try:
            headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            response = web.StreamResponse(headers=headers)
            await response.prepare(request)
            try:
                for index in range(count):
                    payload = {"index": index, "time": time.time(), "pod": self.ctx.pod_name}
                    await response.write(f"data: {json.dumps(payload)}\n\n".encode())
                    await asyncio.sleep(interval)
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
            except ConnectionResetError:  # aiohttp's ClientConnectionResetError too: the client left
                self._log("client disconnected mid-stream")
            return response
        finally:
            self.in_flight -= 1
