"""Command line: `python -m kubesim serve --port 6443`, `python -m kubesim kubeconfig --port 6443` and
`python -m kubesim token --sa NAMESPACE/NAME` (a ServiceAccount token from a running server);
`python -m kubesim tiny-model` and `tiny-adapter` write checkpoints for the real vLLM (kubesim/tinymodel.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
import urllib.error
import urllib.request

import yaml

from .cluster.assembly import add_cluster_arguments, cluster_config_from_args


def kubeconfig(host: str, port: int, token: str | None = None, tls: bool = False) -> dict:
    """A kubeconfig whose current context points at a kubesim on host:port (HTTPS with `tls`)."""
    user = {"token": token} if token else {}
    cluster = {"server": f"{'https' if tls else 'http'}://{host}:{port}"}
    if tls:  # the certificate is made anew at every start
        cluster["insecure-skip-tls-verify"] = True
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": cluster}],
        "users": [{"name": "kubesim", "user": user}],
        "contexts": [{"name": "kubesim", "context": {"cluster": "kubesim", "user": "kubesim",
                                                      "namespace": "default"}}],
        "current-context": "kubesim",
        "preferences": {},
    }


async def _serve(args) -> None:
    from .apiserver.server import Server
    from .cluster.assembly import Cluster

    server = Server(host=args.host, port=args.port, token=args.token, seed=args.seed, state_file=args.state,
                    tune_gc=True, authorization=args.authorization, tls=args.tls)
    if not args.api_only:
        Cluster(server, cluster_config_from_args(args)).install()  # nodes, scheduler, controllers, kubelet
    await server.start()
    print(f"kubesim API server listening on {server.url}{' (API only)' if args.api_only else ''}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def _token(args) -> int:
    """Ask the server's TokenRequest API for a ServiceAccount token, as `kubectl create token` does."""
    namespace, _, name = args.sa.partition("/")
    if not namespace or not name:
        print("error: --sa must be NAMESPACE/NAME", file=sys.stderr)
        return 2
    url = f"{args.server.rstrip('/')}/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": args.duration}}).encode()
    headers = {"Content-Type": "application/json"}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)  # noqa: S310 - any server URL
    # a kubesim --tls server's certificate is self-signed and made at start: nothing to verify it against
    context = ssl._create_unverified_context() if url.startswith("https") else None  # noqa: S323
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:  # noqa: S310
            print(json.loads(response.read())["status"]["token"])
            return 0
    except urllib.error.HTTPError as error:
        try:
            message = json.loads(error.read()).get("message", error.reason)
        except ValueError:
            message = error.reason
        print(f"error: {message}", file=sys.stderr)
    except OSError as error:
        print(f"error: cannot reach {args.server}: {error}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubesim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the API server")
    serve.add_argument("--port", type=int, default=6443)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--token", default=None, help="require Authorization: Bearer TOKEN")
    serve.add_argument("--seed", type=int, default=None, help="seed for uids and generated names")
    serve.add_argument("--state", default=None, help="snapshot file: load at start, save on change and exit")
    serve.add_argument("--tls", action="store_true",
                       help="serve HTTPS with a self-signed certificate (kubectl sends tokens over HTTPS only)")
    serve.add_argument("--authorization", choices=["open", "rbac"], default="open",
                       help="rbac: refuse requests RBAC does not allow (403); open (default): allow every request")
    serve.add_argument("--api-only", action="store_true",
                       help="the API server alone, answering from memory: no nodes, scheduler, controllers or kubelet "
                            "(nothing runs and no pod is ever made; for measuring a client's own cost)")
    add_cluster_arguments(serve)
    kc = commands.add_parser("kubeconfig", help="print a kubeconfig for a kubesim server")
    kc.add_argument("--port", type=int, default=6443)
    kc.add_argument("--host", default="127.0.0.1")
    kc.add_argument("--token", default=None)
    kc.add_argument("--tls", action="store_true", help="for a server started with --tls")
    tok = commands.add_parser("token", help="print a ServiceAccount token from a running server (TokenRequest)")
    tok.add_argument("--sa", required=True, metavar="NAMESPACE/NAME", help="the ServiceAccount")
    tok.add_argument("--server", default="http://127.0.0.1:6443", help="the kubesim server")
    tok.add_argument("--token", default=None, help="the server's --token, if it requires one")
    tok.add_argument("--duration", type=int, default=3600, help="validity in seconds (at least 600)")
    from . import loadgen, tinymodel

    loadgen.build_parser(commands.add_parser("load", help="send OpenAI traffic to a service or URL"))
    tinymodel.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "load":
        return loadgen.main(args=args)
    if args.command in ("tiny-model", "tiny-adapter"):
        return tinymodel.run(args, parser.error)
    if args.command == "token":
        return _token(args)
    if args.command == "kubeconfig":
        sys.stdout.write(yaml.safe_dump(kubeconfig(args.host, args.port, args.token, args.tls), sort_keys=False))
        return 0
    try:
        cluster_config_from_args(args)  # refuse a bad --nodes or fault flag with a usage error
    except ValueError as error:
        parser.error(str(error))
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
