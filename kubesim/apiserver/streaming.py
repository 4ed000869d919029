"""`kubectl exec` and `kubectl port-forward` over WebSocket, as kubectl ≥ 1.31 and the official client speak them.

- exec (`.../pods/{name}/exec?command=...`): subprotocols `v5.channel.k8s.io` / `v4.channel.k8s.io`: output on
  channels 1 (stdout) and 2 (stderr), then a `Status` on channel 3 (`NonZeroExitCode` with the exit code as its
  cause when the command fails). The command runs in the container's kubelet (the
  cluster's `kubesim.cluster.shell`).
- port-forward (`.../pods/{name}/portforward?ports=...`): kubectl tunnels SPDY in the WebSocket
  (`SPDY/3.1+portforward.k8s.io`): one data and one error stream per local connection, each connection a real
  TCP connection to the container's port. The official client uses `v4.channel.k8s.io`: channels 2i (data) and
  2i+1 (error) for the i-th port, each opened by the port number in two little-endian bytes.
  `kubectl port-forward svc/NAME` resolves the Service to a pod and port itself, so it arrives here too.
- A client that asks for SPDY itself (`Upgrade: SPDY/3.1`, kubectl before 1.31 or with the WebSocket feature gates
  off) gets 400 BadRequest saying kubesim streams over WebSocket only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from aiohttp import WSMsgType, web

from . import spdy
from .errors import ApiError
from .kubelets import Kubelets

log = logging.getLogger(__name__)

EXEC_PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
EXEC_START_S = 0.2  # the least time from an exec's upgrade to its first output (a process start)
TUNNEL_PROTOCOL = "SPDY/3.1+portforward.k8s.io"
CHANNEL_PROTOCOLS = ["v4.channel.k8s.io", "v5.channel.k8s.io", "portforward.k8s.io"]
SPDY_REFUSED = ("kubesim streams exec and port-forward over WebSocket only (v5.channel.k8s.io, "
                "SPDY/3.1+portforward.k8s.io), not over SPDY: use kubectl 1.31 or later without "
                "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false or PORT_FORWARD_WEBSOCKETS=false")
STDOUT, STDERR, ERROR = 1, 2, 3
CHUNK = 32 * 1024


def _upgrade_check(request: web.Request) -> None:
    upgrade = request.headers.get("Upgrade", "").lower()
    if upgrade.startswith("spdy"):
        raise ApiError.bad_request(SPDY_REFUSED)
    if upgrade != "websocket":
        raise ApiError.bad_request("Upgrade request required")


def _offered(request: web.Request) -> list[str]:
    return [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]


class Streaming:
    """The exec and port-forward endpoints, over the kubelets the cluster wires in."""

    def __init__(self, store, kubelets: Kubelets):
        self.store = store
        self.kubelets = kubelets

    def routes(self) -> list[tuple[str, str, object]]:
        base = "/api/v1/namespaces/{namespace}/pods/{name}"
        return [(method, base + sub, handler) for sub, handler in (("/exec", self.exec), ("/portforward",
                                                                                          self.portforward))
                for method in ("GET", "POST")]

    # ------------------------------------------------------------------ exec

    def _container(self, pod: dict, wanted: str | None) -> str:
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        name = pod["metadata"]["name"]
        if not wanted:
            if len(names) > 1:
                raise ApiError.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                           f"[{' '.join(names)}]")
            return names[0] if names else ""
        if wanted not in names:
            raise ApiError.bad_request(f"container {wanted} is not valid for pod {name}")
        return wanted

    async def exec(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self.store.get("v1/pods", namespace, name)
        container = self._container(pod, request.query.get("container"))
        run = self.kubelets.exec_in(pod, container)
        command = request.query.getall("command", [])
        _upgrade_check(request)
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, autoping=True)
        await ws.prepare(request)
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        try:
            result = await asyncio.to_thread(run, command)  # a command may dial a workload this loop serves
            # A runtime takes a moment to start the process; client-go's websocket executor discards what arrives
            # before it has set up its streams ("Unknown stream id 1"), so no output goes out sooner than that.
            await asyncio.sleep(max(0.0, EXEC_START_S - (loop.time() - accepted)))
            if result.stdout:
                await ws.send_bytes(bytes([STDOUT]) + result.stdout.encode())
            if result.stderr:
                await ws.send_bytes(bytes([STDERR]) + result.stderr.encode())
            if result.exit_code:
                status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                          "message": f"command terminated with non-zero exit code: error executing command "
                                     f"[{' '.join(command)}], exit code {result.exit_code}",
                          "details": {"causes": [{"reason": "ExitCode", "message": str(result.exit_code)}]}}
            else:
                status = {"metadata": {}, "status": "Success"}
            await ws.send_bytes(bytes([ERROR]) + json.dumps(status).encode())
        finally:
            await ws.close()
        return ws

    # ------------------------------------------------------------------ port-forward

    async def portforward(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self.store.get("v1/pods", namespace, name)
        if (pod.get("status") or {}).get("phase") != "Running":
            raise ApiError.bad_request(f"pod {name} is not running")
        _upgrade_check(request)
        if TUNNEL_PROTOCOL in _offered(request):
            ws = web.WebSocketResponse(protocols=[TUNNEL_PROTOCOL], autoping=True, max_msg_size=0)
            await ws.prepare(request)
            await SpdyTunnel(ws, self, namespace, name, pod["metadata"].get("uid", "")).run()
            return ws
        ports = []
        for raw in request.query.getall("ports", []):
            for part in raw.split(","):
                if not part.strip().isdigit():
                    raise ApiError.bad_request(f'invalid port "{part}"')
                ports.append(int(part))
        if not ports:
            raise ApiError.bad_request("query parameter \"ports\" is required")
        ws = web.WebSocketResponse(protocols=CHANNEL_PROTOCOLS, autoping=True, max_msg_size=0)
        await ws.prepare(request)
        await self._channel_forward(ws, namespace, name, ports)
        return ws

    async def _channel_forward(self, ws: web.WebSocketResponse, namespace: str, name: str, ports: list[int]) -> None:
        writers: dict[int, asyncio.StreamWriter] = {}
        pumps = []

        async def pump(index: int, reader: asyncio.StreamReader) -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                while chunk := await reader.read(CHUNK):
                    await ws.send_bytes(bytes([2 * index]) + chunk)
            writers.pop(index, None)
            if not writers:  # every forwarded connection ended: so does the stream, as on the kubelet
                await ws.close()

        for i, port in enumerate(ports):
            for channel in (2 * i, 2 * i + 1):
                await ws.send_bytes(bytes([channel]) + port.to_bytes(2, "little"))
            local = self.kubelets.forward_port(namespace, name, port)
            try:
                if local is None:
                    raise OSError("connection refused")
                reader, writer = await asyncio.open_connection("127.0.0.1", local)
            except OSError as error:
                message = f"error forwarding port {port} to pod {name}: {error}"
                await ws.send_bytes(bytes([2 * i + 1]) + message.encode())
                continue
            writers[i] = writer
            pumps.append(asyncio.ensure_future(pump(i, reader)))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                channel, data = msg.data[0], msg.data[1:]
                writer = writers.get(channel // 2)
                if writer is not None and channel % 2 == 0 and data:
                    writer.write(data)
                    await writer.drain()
        finally:
            for task in pumps:
                task.cancel()
            for writer in list(writers.values()):
                writer.close()


class SpdyTunnel:
    """One `kubectl port-forward` connection: SPDY streams in pairs (error, data) per forwarded connection."""

    def __init__(self, ws: web.WebSocketResponse, streaming: Streaming, namespace: str, name: str, uid: str):
        self.ws, self.streaming, self.namespace, self.name, self.uid = ws, streaming, namespace, name, uid
        self.framer = spdy.Framer()
        self.error_streams: dict[str, int] = {}  # requestid -> error stream id
        self.writers: dict[int, asyncio.StreamWriter] = {}  # data stream id -> connection to the container
        self.tasks: set[asyncio.Task] = set()
        self.last_stream = 0
        self.lock = asyncio.Lock()

    async def send(self, frame: bytes) -> None:
        async with self.lock:
            await self.ws.send_bytes(frame)

    async def run(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                for frame in self.framer.feed(msg.data):
                    await self.handle(frame)
        except (ConnectionError, RuntimeError) as error:
            log.debug("port-forward tunnel to %s/%s ended: %r", self.namespace, self.name, error)
        finally:
            for task in list(self.tasks):
                task.cancel()
            for writer in self.writers.values():
                writer.close()

    async def handle(self, frame: spdy.Frame) -> None:
        if frame.type == spdy.PING:
            await self.send(spdy.ping_frame(frame.data))
        elif frame.type == spdy.SYN_STREAM:
            self.last_stream = max(self.last_stream, frame.stream_id)
            kind, request_id = frame.headers.get("streamtype"), frame.headers.get("requestid", "")
            connected: tuple | str | None = None
            if kind == "data":  # connect before replying, so no data frame can arrive ahead of the connection
                connected = await self.connect(frame.headers.get("port", ""))
            await self.send(self.framer.syn_reply(frame.stream_id))
            if kind == "error":
                self.error_streams[request_id] = frame.stream_id
            elif isinstance(connected, tuple):
                self.writers[frame.stream_id] = connected[1]
                task = asyncio.ensure_future(self.pump(frame.stream_id, request_id, *connected))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif kind == "data":
                error_stream = self.error_streams.get(request_id)
                if error_stream is not None:
                    await self.send(spdy.data_frame(error_stream, str(connected).encode(), fin=True))
                await self.send(spdy.data_frame(frame.stream_id, b"", fin=True))
        elif frame.type == 0:
            writer = self.writers.get(frame.stream_id)
            if writer is None:
                return
            try:
                if frame.data:
                    writer.write(frame.data)
                    await writer.drain()
                if frame.fin and writer.can_write_eof():
                    writer.write_eof()
            except (ConnectionError, RuntimeError, OSError):
                # the container closed this connection: the other streams of the tunnel go on
                self.writers.pop(frame.stream_id, None)
                writer.close()
        elif frame.type == spdy.RST_STREAM:
            writer = self.writers.pop(frame.stream_id, None)
            if writer is not None:
                writer.close()

    async def connect(self, port: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        """A connection to the container's port, or the error message the kubelet would send."""
        local = self.streaming.kubelets.forward_port(self.namespace, self.name, int(port)) if port.isdigit() else None
        try:
            if local is None:
                raise OSError("connect: connection refused")
            return await asyncio.open_connection("127.0.0.1", local)
        except OSError as error:
            return (f"error forwarding port {port} to pod {self.uid}, uid : failed to execute portforward in "
                    f"network namespace: failed to connect to localhost:{port} inside namespace: {error}")

    async def pump(self, stream_id: int, request_id: str, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
        """Container -> client until the container closes, then FIN on the data and error streams."""
        try:
            while chunk := await reader.read(CHUNK):
                await self.send(spdy.data_frame(stream_id, chunk))
            await self.send(spdy.data_frame(stream_id, b"", fin=True))
            error_stream = self.error_streams.pop(request_id, None)
            if error_stream is not None:
                await self.send(spdy.data_frame(error_stream, b"", fin=True))
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self.writers.pop(stream_id, None)
            writer.close()
