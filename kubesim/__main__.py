"""Command line: `python -m kubesim serve --port 6443` and `python -m kubesim kubeconfig --port 6443`."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import yaml

from .cluster.assembly import add_cluster_arguments, cluster_config_from_args


def kubeconfig(host: str, port: int, token: str | None = None) -> dict:
    """A kubeconfig whose current context points at a kubesim on host:port."""
    user = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": {"server": f"http://{host}:{port}"}}],
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
                    tune_gc=True)
    Cluster(server, cluster_config_from_args(args)).install()  # nodes, scheduler, controllers, kubelet
    await server.start()
    print(f"kubesim API server listening on {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubesim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the API server")
    serve.add_argument("--port", type=int, default=6443)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--token", default=None, help="require Authorization: Bearer TOKEN")
    serve.add_argument("--seed", type=int, default=None, help="seed for uids and generated names")
    serve.add_argument("--state", default=None, help="snapshot file: load at start, save on change and exit")
    add_cluster_arguments(serve)
    kc = commands.add_parser("kubeconfig", help="print a kubeconfig for a kubesim server")
    kc.add_argument("--port", type=int, default=6443)
    kc.add_argument("--host", default="127.0.0.1")
    kc.add_argument("--token", default=None)
    from . import loadgen

    loadgen.build_parser(commands.add_parser("load", help="send OpenAI traffic to a service or URL"))
    args = parser.parse_args(argv)
    if args.command == "load":
        return loadgen.main(args=args)
    if args.command == "kubeconfig":
        sys.stdout.write(yaml.safe_dump(kubeconfig(args.host, args.port, args.token), sort_keys=False))
        return 0
    try:
        cluster_config_from_args(args)  # refuse a bad --nodes or fault flag with a usage error
    except ValueError as error:
        parser.error(str(error))
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
