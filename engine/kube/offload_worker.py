"""The worker process of `engine.kube.offload`: sends the HTTP requests its parent hands it and
answers each, so that their client CPU (TLS, http.client, urllib3: about 1 ms an eviction) is
spent on another core than scalebot's interpreter.

Run as `python -m engine.kube.offload_worker MAX_THREADS` by `engine.kube.offload` only. It
imports the standard library and urllib3, nothing of scalebot's or the kubernetes package (a
worker starts in a fraction of a second and holds a few MiB). It holds no credentials of its own:
every request arrives with its headers (the bearer token as the parent's configuration gives it
then) and, the first time a connection pool is named, with that pool's settings, copied from the
parent's own pool (TLS verification, CA and client certificate files, proxy, retry policy, size).

The frames on stdin and stdout are a 4-byte big-endian length and a pickle (the parent and this
worker are one program; nothing else writes to these pipes). A request: `(id, pool key, pool
settings or None, method, URL, headers, body, timeout)`; an answer: `(id, status, reason,
Retry-After, body)`, or `(id, None, one line saying why no answer came)`. At the end of stdin the
worker finishes the requests in hand and exits.
"""

from __future__ import annotations

import pickle
import re
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import urllib3

HEADER = struct.Struct("!I")

PoolSettings = dict[str, Any]
"""`{"proxy": URL or None, "proxy_headers": {...}, "pool_kw": {...}}`: a urllib3 PoolManager's
(or ProxyManager's) own `connection_pool_kw` and proxy, as `pool_settings` reads them."""


def read_frame(stream: IO[bytes]) -> bytes | None:
    """One frame's payload, or None at the end of the stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (length,) = HEADER.unpack(head)
    payload = stream.read(length)
    return payload if len(payload) == length else None


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


def pool_settings(pool_manager: Any) -> PoolSettings:
    """What a worker needs to build the same connection pool as `pool_manager` (the ApiClient's)."""
    if isinstance(pool_manager, urllib3.ProxyManager):
        kw = {k: v for k, v in pool_manager.connection_pool_kw.items() if not k.startswith("_proxy")}
        return {
            "proxy": str(pool_manager.proxy),
            "proxy_headers": dict(pool_manager.proxy_headers),
            "pool_kw": kw,
        }
    return {"proxy": None, "proxy_headers": {}, "pool_kw": dict(pool_manager.connection_pool_kw)}


def build_pool(settings: PoolSettings) -> urllib3.PoolManager:
    kw = dict(settings["pool_kw"])
    if settings["proxy"]:
        return urllib3.ProxyManager(settings["proxy"], proxy_headers=settings["proxy_headers"], **kw)
    return urllib3.PoolManager(**kw)


def transport_line(exc: BaseException) -> str:
    """A failure to get an answer in one line that names the URL tried (as kubectl's `Get
    "https://…": dial tcp …`), not urllib3's `HTTPSConnectionPool(host=…, port=…): Max retries …`."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.pool is not None:
        pool = exc.pool
        url = f"{pool.scheme}://{pool.host}:{pool.port}{exc.url or ''}"
        reason = _one_line(exc.reason or exc)
        # `HTTPSConnection(host='…', port=…): Failed to establish …`: the URL already says where.
        reason = re.sub(r"^\w*Connection(Pool)?\(host=[^)]*\): ", "", reason)
        return f"{url}: {reason}"
    return _one_line(exc)


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


class _Worker:
    def __init__(self, out: IO[bytes], max_threads: int) -> None:
        self._out = out
        self._write = threading.Lock()
        self._pools: dict[int, urllib3.PoolManager] = {}
        self._sending = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="send")

    def serve(self, stream: IO[bytes]) -> None:
        try:
            while (payload := read_frame(stream)) is not None:
                request_id, key, settings, *request = pickle.loads(payload)
                if settings is not None:
                    self._pools[key] = build_pool(settings)
                self._sending.submit(self._send, request_id, self._pools[key], tuple(request))
        finally:
            self._sending.shutdown(wait=True)

    def _send(self, request_id: int, pool: urllib3.PoolManager, request: tuple[Any, ...]) -> None:
        """Send `(method, URL, headers, body, timeout)` and write its answer, whatever happens."""
        method, url, headers, body, timeout = request
        answer: tuple[Any, ...]
        try:
            response = pool.urlopen(
                method, url, body=body, headers=headers, timeout=urllib3.Timeout(total=timeout)
            )
            retry_after = response.headers.get("Retry-After")
            answer = (request_id, response.status, response.reason, retry_after, response.data)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            answer = (request_id, None, transport_line(exc))
        except Exception as exc:  # the parent waits for an answer to every request
            answer = (request_id, None, f"the worker could not send it: {_one_line(exc)}")
        data = frame(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        with self._write:
            self._out.write(data)
            self._out.flush()


def main(argv: list[str]) -> int:
    max_threads = int(argv[0]) if argv else 64
    _Worker(sys.stdout.buffer, max_threads).serve(sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
