"""What `kubectl exec` can run in a simulated container: a few commands over a small view of the container.

Commands: `ls [-l] [-a] [PATH...]`, `cat FILE...`, `env` / `printenv [NAME...]`, `hostname`, `pwd`, `echo`,
`true`, `false`, `nvidia-smi` (table, `-L`, `--query-gpu=... --format=csv[,noheader][,nounits]`), `ps [-ef|aux]`,
`curl [-sSf] [-m SECONDS] URL` (a GET from the pod itself, through the pod network of
kubesim/cluster/dialing.py and its NetworkPolicy checks, with curl's exit codes), and `sh -c 'ONE COMMAND'`.
Anything else exits 127 with a shell's `not found`. Files: `/etc/hostname`,
`/etc/hosts`, `/etc/resolv.conf`, the ServiceAccount namespace file, and the keys of ConfigMap and Secret volumes
at their mount paths. `nvidia-smi` exists only in containers holding GPUs, as the NVIDIA runtime injects it.
"""

from __future__ import annotations

import posixpath
import shlex
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from kubesim.cluster.gpus import Device, Reading

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DRIVER_VERSION = "550.127.05"
CUDA_VERSION = "12.4"
BASE_DIRS = ("/bin", "/dev", "/etc", "/home", "/lib", "/proc", "/root", "/run", "/sbin", "/sys", "/tmp", "/usr",  # noqa: S108 - a listing, not a file
             "/var")


@dataclass
class Container:
    """The view of one container a command runs against."""

    namespace: str
    pod: str
    name: str
    pod_ip: str
    env: list[tuple[str, str]]  # in the order `env` prints it
    files: dict[str, str]  # absolute path -> content
    command_line: str  # PID 1
    started: float  # epoch seconds of the container start
    gpus: list[tuple[Device, Reading]] = field(default_factory=list)
    dial: Callable[[str, int, str, float], Reply] | None = None  # (host, port, path, timeout): the pod network


@dataclass
class Reply:
    """A connection's outcome: an HTTP status and body, or curl's exit code and message when none came."""

    status: int = 0
    body: str = ""
    error: int = 0
    message: str = ""


@dataclass
class Result:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


def run(container: Container, argv: list[str]) -> Result:
    """Run `argv` in the container; unknown commands exit 127 as a shell reports them."""
    if not argv:
        return Result(stderr="error: you must specify at least one command for the container\n", exit_code=1)
    name, args = argv[0], argv[1:]
    if name in ("sh", "/bin/sh", "bash", "/bin/bash") and len(args) >= 2 and args[0] == "-c":
        try:
            inner = shlex.split(args[1])
        except ValueError as error:
            return Result(stderr=f"sh: 1: Syntax error: {error}\n", exit_code=2)
        if any(token in ("|", "&&", "||", ";", ">", "<") for token in inner):
            return Result(stderr="sh: kubesim runs one simple command per exec (no pipes or lists)\n", exit_code=2)
        return run(container, inner) if inner else Result()
    if name in ("sh", "/bin/sh", "bash", "/bin/bash"):
        return Result(stderr="kubesim does not simulate interactive shells: run one command, e.g. "
                             "kubectl exec POD -- ls /etc, or sh -c 'ONE COMMAND'\n", exit_code=126)
    handler = _COMMANDS.get(posixpath.basename(name))
    if handler is None or (handler is _nvidia_smi and not container.gpus):
        return Result(stderr=f"sh: 1: {name}: not found\n", exit_code=127)
    return handler(container, args)


# ---------------------------------------------------------------------------------------------- files


def _dirs(container: Container) -> set[str]:
    dirs = {"/", *BASE_DIRS}
    for path in container.files:
        parent = posixpath.dirname(path)
        while parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    return dirs


def _children(container: Container, directory: str) -> list[str]:
    prefix = directory.rstrip("/") + "/"
    names = {p[len(prefix):].split("/", 1)[0] for p in (*container.files, *_dirs(container))
             if p.startswith(prefix) and p != prefix}
    return sorted(n for n in names if n)


def _ls(container: Container, args: list[str]) -> Result:
    flags = "".join(a[1:] for a in args if a.startswith("-"))
    paths = [a for a in args if not a.startswith("-")] or ["."]
    dirs = _dirs(container)
    out, err, code = [], [], 0
    for raw in paths:
        path = posixpath.normpath(posixpath.join("/", raw))
        if path in dirs:
            names = _children(container, path)
            if "a" in flags:
                names = [".", "..", *names]
            if len(paths) > 1:
                out.append(f"{raw}:")
            if "l" in flags:
                out.append(f"total {len(names) * 4}")
                for n in names:
                    child = posixpath.join(path, n)
                    if child in container.files:
                        out.append(f"-rw-r--r-- 1 root root {len(container.files[child].encode()):>6} Jan  1 00:00 {n}")
                    else:
                        out.append(f"drwxr-xr-x 2 root root   4096 Jan  1 00:00 {n}")
            else:
                out.extend(names)
        elif path in container.files:
            out.append(raw)
        else:
            err.append(f"ls: cannot access '{raw}': No such file or directory")
            code = 2
    return Result("".join(line + "\n" for line in out), "".join(line + "\n" for line in err), code)


def _cat(container: Container, args: list[str]) -> Result:
    out, err, code = [], [], 0
    dirs = _dirs(container)
    for raw in args:
        path = posixpath.normpath(posixpath.join("/", raw))
        if path in container.files:
            out.append(container.files[path])
        elif path in dirs:
            err.append(f"cat: {raw}: Is a directory\n")
            code = 1
        else:
            err.append(f"cat: {raw}: No such file or directory\n")
            code = 1
    return Result("".join(out), "".join(err), code)


# ---------------------------------------------------------------------------------------------- simple commands


def _env(container: Container, args: list[str]) -> Result:
    return Result("".join(f"{k}={v}\n" for k, v in container.env))


def _printenv(container: Container, args: list[str]) -> Result:
    if not args:
        return _env(container, args)
    values = dict(container.env)
    found = [values[a] for a in args if a in values]
    return Result("".join(v + "\n" for v in found), exit_code=0 if len(found) == len(args) else 1)


def _hostname(container: Container, args: list[str]) -> Result:
    return Result((container.pod_ip if "-i" in args else container.pod) + "\n")


def _echo(container: Container, args: list[str]) -> Result:
    if args[:1] == ["-n"]:
        return Result(" ".join(args[1:]))
    return Result(" ".join(args) + "\n")


def _ps(container: Container, args: list[str]) -> Result:
    now = time.time()
    cpu = time.strftime("%H:%M:%S", time.gmtime(max(0, now - container.started) * 0.05))
    start = time.strftime("%H:%M", time.gmtime(container.started))
    me = "ps " + " ".join(args) if args else "ps"
    if args and args[0] in ("-ef", "-e", "-A", "-f"):
        lines = ["UID          PID    PPID  C STIME TTY          TIME CMD",
                 f"root           1       0  0 {start} ?        {cpu} {container.command_line}",
                 f"root          42       0  0 {time.strftime('%H:%M', time.gmtime(now))} ?        00:00:00 {me}"]
    elif args and args[0] in ("aux", "-aux"):
        lines = ["USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND",
                 f"root           1  5.0  1.2 1232496 406124 ?      Ssl  {start}   {cpu[3:]} {container.command_line}",
                 f"root          42  0.0  0.0   7064  1560 ?        Rs   {time.strftime('%H:%M', time.gmtime(now))}"
                 f"   0:00 {me}"]
    else:
        first = container.command_line.split()[0] if container.command_line else "sh"
        lines = ["    PID TTY          TIME CMD", f"      1 ?        {cpu} {posixpath.basename(first)}",
                 "     42 ?        00:00:00 ps"]
    return Result("".join(line + "\n" for line in lines))


# ---------------------------------------------------------------------------------------------- curl

_CURL_FLAGS = {"-s": "silent", "--silent": "silent", "-S": "show-error", "--show-error": "show-error",
               "-f": "fail", "--fail": "fail"}
_CURL_VALUED = {"-m": "max-time", "--max-time": "max-time", "--connect-timeout": "max-time"}


def _curl_options(args: list[str]) -> tuple[set[str], float, list[str]] | Result:
    flags, timeout, urls, rest = set(), 300.0, [], list(args)
    while rest:
        arg = rest.pop(0)
        short = [f"-{c}" for c in arg[1:]] if arg.startswith("-") and not arg.startswith("--") else [arg]
        if not arg.startswith("-"):
            urls.append(arg)
        elif arg in _CURL_VALUED or (short[0] == "-m" and len(arg) > 2):
            value = arg[2:] if arg not in _CURL_VALUED else (rest.pop(0) if rest else "")
            try:
                timeout = float(value)
            except ValueError:
                return Result(stderr=f"curl: option {arg}: expected a proper numerical parameter\n", exit_code=2)
        elif all(s in _CURL_FLAGS for s in short):
            flags.update(_CURL_FLAGS[s] for s in short)
        else:
            return Result(stderr=f"curl: option {arg}: is unknown\ncurl: try 'curl --help' for more information\n",
                          exit_code=2)
    return flags, timeout, urls


def _curl(container: Container, args: list[str]) -> Result:
    options = _curl_options(args)
    if isinstance(options, Result):
        return options
    flags, timeout, urls = options
    if not urls:
        return Result(stderr="curl: no URL specified!\n", exit_code=2)
    url = urllib.parse.urlsplit(urls[0] if "://" in urls[0] else f"http://{urls[0]}")
    if url.scheme not in ("http", "https"):
        return Result(stderr=f'curl: (1) Protocol "{url.scheme}" not supported\n', exit_code=1)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return Result(stderr="curl: (3) URL rejected: Port number was not a decimal number\n", exit_code=3)
    if container.dial is None or not url.hostname:
        return Result(stderr=f"curl: (6) Could not resolve host: {url.hostname or ''}\n", exit_code=6)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    reply = container.dial(url.hostname, port, path, timeout)
    if not reply.error and "fail" in flags and reply.status >= 400:
        reply = Reply(error=22, message=f"The requested URL returned error: {reply.status}")
    if reply.error:
        quiet = "silent" in flags and "show-error" not in flags
        return Result(stderr="" if quiet else f"curl: ({reply.error}) {reply.message}\n", exit_code=reply.error)
    return Result(reply.body)


# ---------------------------------------------------------------------------------------------- nvidia-smi

_QUERY_FIELDS = {
    "index": ("index", lambda d, r: str(d.index), ""),
    "name": ("name", lambda d, r: d.name, ""),
    "uuid": ("uuid", lambda d, r: d.uuid, ""),
    "pci.bus_id": ("pci.bus_id", lambda d, r: d.bus_id, ""),
    "memory.total": ("memory.total [MiB]", lambda d, r: str(r.total_mib), " MiB"),
    "memory.used": ("memory.used [MiB]", lambda d, r: str(r.used_mib), " MiB"),
    "memory.free": ("memory.free [MiB]", lambda d, r: str(r.free_mib), " MiB"),
    "utilization.gpu": ("utilization.gpu [%]", lambda d, r: str(round(r.utilization * 100)), " %"),
    "temperature.gpu": ("temperature.gpu", lambda d, r: str(_temperature(r)), ""),
    "power.draw": ("power.draw [W]", lambda d, r: f"{_power(d, r):.2f}", " W"),
    "driver_version": ("driver_version", lambda d, r: DRIVER_VERSION, ""),
}


def _temperature(reading: Reading) -> int:
    return round(32 + 40 * reading.utilization)


def _power(device: Device, reading: Reading) -> float:
    idle = device.tdp_watts * 0.12
    return idle + (device.tdp_watts * 0.85 - idle) * reading.utilization


def _nvidia_smi(container: Container, args: list[str]) -> Result:
    if "-L" in args or "--list-gpus" in args:
        return Result("".join(f"GPU {i}: {d.name} (UUID: {d.uuid})\n" for i, (d, _r) in enumerate(container.gpus)))
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is not None:
        fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
        if "csv" not in fmt.split(","):
            return Result(stderr='Option "--format" is required when "--query-gpu" is given.\n', exit_code=2)
        names = [q.strip() for q in query.split(",") if q.strip()]
        unknown = [n for n in names if n not in _QUERY_FIELDS]
        if unknown:
            return Result(stderr=f'Field "{unknown[0]}" is not a valid field to query.\n\n', exit_code=2)
        units = "nounits" not in fmt
        lines = [] if "noheader" in fmt else [", ".join(_QUERY_FIELDS[n][0] if units else
                                                       _QUERY_FIELDS[n][0].split(" [")[0] for n in names)]
        for i, (device, reading) in enumerate(container.gpus):
            values = []
            for n in names:
                value = str(i) if n == "index" else _QUERY_FIELDS[n][1](device, reading)
                values.append(value + (_QUERY_FIELDS[n][2] if units else ""))
            lines.append(", ".join(values))
        return Result("".join(line + "\n" for line in lines))
    return Result(_smi_table(container))


def _smi_table(container: Container) -> str:
    bar = "+-----------------------------------------+------------------------+----------------------+"
    lines = [time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime()) + "       ",
             "+" + "-" * 89 + "+",
             f"| NVIDIA-SMI {DRIVER_VERSION:<22} Driver Version: {DRIVER_VERSION:<14} CUDA Version: {CUDA_VERSION:<9}|",
             "|-----------------------------------------+------------------------+----------------------+",
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|=========================================+========================+======================|"]
    for i, (device, reading) in enumerate(container.gpus):
        name = device.name[:28]
        power = f"{_power(device, reading):.0f}W / {device.tdp_watts:>4}W"
        memory = f"{reading.used_mib}MiB / {reading.total_mib:>6}MiB"
        lines += [f"| {i:>3}  {name:<28}   On  | {device.bus_id:>18} Off | {0:>20} |",
                  f"| N/A   {_temperature(reading):>2}C    P0 {power:>23} | {memory:>22} | "
                  f"{round(reading.utilization * 100):>6}%      Default |",
                  "|                                         |                        |             Disabled |",
                  bar]
    lines += [" " * 91,
              "+" + "-" * 89 + "+",
              "| Processes:" + " " * 78 + "|",
              "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|" + "=" * 89 + "|",
              "|  No running processes found" + " " * 61 + "|",
              "+" + "-" * 89 + "+"]
    return "".join(line + "\n" for line in lines)


_COMMANDS = {
    "ls": _ls, "cat": _cat, "env": _env, "printenv": _printenv, "hostname": _hostname, "echo": _echo,
    "pwd": lambda c, a: Result("/\n"), "true": lambda c, a: Result(), "false": lambda c, a: Result(exit_code=1),
    "ps": _ps, "nvidia-smi": _nvidia_smi, "curl": _curl, "whoami": lambda c, a: Result("root\n"),
}
