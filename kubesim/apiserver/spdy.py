"""The part of SPDY/3.1 framing that `kubectl port-forward` speaks inside its WebSocket.

kubectl ≥ 1.31 tunnels SPDY through a WebSocket (subprotocol `SPDY/3.1+portforward.k8s.io`): the binary
messages carry a byte stream of SPDY frames. `Framer.feed(bytes)` yields the frames it completes; the
`*_frame` functions build the frames a server sends. Header blocks are zlib streams with the SPDY/3 dictionary
(the one `spdy-py` ships), one compression context per direction for the whole connection.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from spdy.dictionary import zdict as SPDY3_DICTIONARY

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
RST_CANCEL = 5


@dataclass
class Frame:
    """A parsed frame: control frames have `type` (data frames 0), `stream_id`, `flags`, `data`, `headers`."""

    type: int
    stream_id: int
    flags: int
    data: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class Framer:
    """Reads frames from a byte stream and writes header blocks, with the connection's zlib contexts."""

    def __init__(self):
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=SPDY3_DICTIONARY)
        self._deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, zdict=SPDY3_DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer.extend(data)
        frames = []
        while len(self._buffer) >= 8:
            length = int.from_bytes(self._buffer[5:8], "big")
            if len(self._buffer) < 8 + length:
                break
            head, payload = bytes(self._buffer[:8]), bytes(self._buffer[8:8 + length])
            del self._buffer[:8 + length]
            frames.append(self._parse(head, payload))
        return frames

    def _parse(self, head: bytes, payload: bytes) -> Frame:
        flags = head[4]
        if not head[0] & 0x80:  # data frame
            return Frame(0, int.from_bytes(head[:4], "big") & 0x7FFFFFFF, flags, payload)
        kind = int.from_bytes(head[2:4], "big")
        stream_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF if len(payload) >= 4 else 0
        if kind == SYN_STREAM:
            return Frame(kind, stream_id, flags, headers=self._headers(payload[10:]))
        if kind in (SYN_REPLY, HEADERS):
            return Frame(kind, stream_id, flags, headers=self._headers(payload[4:]))
        if kind == PING:
            return Frame(kind, 0, flags, payload[:4])
        return Frame(kind, stream_id, flags, payload)

    def _headers(self, block: bytes) -> dict[str, str]:
        raw = self._inflate.decompress(block)
        count, pos, out = int.from_bytes(raw[:4], "big"), 4, {}
        for _ in range(count):
            size = int.from_bytes(raw[pos:pos + 4], "big")
            name = raw[pos + 4:pos + 4 + size].decode()
            pos += 4 + size
            size = int.from_bytes(raw[pos:pos + 4], "big")
            out[name] = raw[pos + 4:pos + 4 + size].decode().split("\x00")[0]
            pos += 4 + size
        return out

    def header_block(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers))
        for name, value in headers.items():
            raw += struct.pack(">I", len(name)) + name.encode() + struct.pack(">I", len(value)) + value.encode()
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def syn_reply(self, stream_id: int, headers: dict[str, str] | None = None) -> bytes:
        return control_frame(SYN_REPLY, 0, struct.pack(">I", stream_id) + self.header_block(headers or {}))


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHB", 0x8000 | VERSION, kind, flags) + len(payload).to_bytes(3, "big") + payload


def data_frame(stream_id: int, data: bytes, fin: bool = False) -> bytes:
    return struct.pack(">IB", stream_id, FLAG_FIN if fin else 0) + len(data).to_bytes(3, "big") + data


def ping_frame(ping_id: bytes) -> bytes:
    return control_frame(PING, 0, ping_id)


def rst_stream_frame(stream_id: int, status: int = RST_CANCEL) -> bytes:
    return control_frame(RST_STREAM, 0, struct.pack(">II", stream_id, status))


def goaway_frame(last_stream_id: int) -> bytes:
    return control_frame(GOAWAY, 0, struct.pack(">II", last_stream_id, 0))
