"""A local Slack for tests: recording Web API, Socket Mode WebSocket server, request signer.

- `SlackApiServer`: a ThreadingHTTPServer on 127.0.0.1:0 answering like Slack's Web API
  (`/api/<method>`) and standing in for `response_url`s (`/response/<id>`). Every call is
  recorded under a lock with a Condition; `wait_for(predicate)` waits on it with a deadline (no
  sleeps). `fail(method, times=N, status=429|500, retry_after=…, delay=…)` scripts faults for the
  next N calls of a method: the fault cases of issue 9 (429 with Retry-After, 500s, slow answers)
  are one line each.
  It also keeps what each channel shows (`shown(channel, ts)`): chat.update without `blocks` keeps
  the old blocks, as Slack does. `enforce_limits()` makes it answer 429 (with Retry-After, the
  seconds until a call would be accepted) as Slack would: chat.postMessage faster than one per
  second per channel after a burst of `post_burst` (two by default), a message edited again within
  half a second, and the Tier methods (`TIER_LIMITS`: chat.update 50, chat.postEphemeral 100,
  users.info 100, conversations.list 20, files.* 100 … per minute; chat.postMessage 120, the
  sender's default workspace budget) beyond their calls per rolling minute, counted per workspace
  and method. Refused calls do not count, and `violations` names
  each. Off by default: a test opts in. `members` lists the channels the bot is in: a post or an
  ephemeral elsewhere fails with `not_in_channel` (an ephemeral needs the bot in the channel too),
  a direct message (channel = a user ID) always goes, and conversations.info says `is_member`.
  users.info answers from `people` (else `user_not_found`), conversations.list pages through
  `channel_list` with Slack's cursors. conversations.history (a channel's top-level messages and
  broadcast replies, newest first) and conversations.replies (a thread, oldest first) answer from
  the messages chat.postMessage posted, after `oldest` and up to `limit`; a message's `metadata`
  only with `include_all_metadata`, as Slack does. The `ts` it gives are counters (tests name
  them), so `oldest` is compared with the Unix time each message was posted at.
  Uploads follow Slack's flow (`files_upload_v2`): files.getUploadURLExternal answers an
  `upload_url` on this server, the POST of the bytes there is recorded as method `upload`
  (body: `file_id`, raw `data`), and files.completeUploadExternal shares the files.
- `SocketModeServer`: websockets' threaded server; sends `hello` on connect, pushes envelopes
  (`slash_commands`, `interactive`) and records the `{"envelope_id": …}` acks; `disconnect()`
  sends Slack's refresh frame so reconnects can be proven.
- `Signer`: bodies and headers signed exactly as Slack signs them (v0 HMAC-SHA256 over the raw
  bytes), with real payload shapes: slash-command form bodies with all 13 fields and
  `payload=` block_actions bodies.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from websockets.sync.server import ServerConnection, serve

from bot.config.settings import SenderSettings

# -- the Web API ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    """Web API method ("chat.update"), or "response_url" for /response/<id>."""
    body: dict[str, Any]
    headers: dict[str, str]
    path: str
    at: float
    """time.monotonic() when the request arrived."""
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)
    """What the server answered (e.g. the `ts` of a posted message)."""


@dataclass
class Fault:
    status: int = 429
    retry_after: float | None = 1
    delay: float = 0.0
    error: str | None = None


POST_RATE = 1.0
POST_BURST = 2.0
TIER_1, TIER_2, TIER_3, TIER_4 = 1, 20, 50, 100
"""Calls per minute per workspace and method (Slack's rate-limits page: "1+ / 20+ / 50+ / 100+")."""
TIER_LIMITS: dict[str, int] = {
    "chat.update": TIER_3,
    "chat.delete": TIER_3,
    "chat.postEphemeral": TIER_4,
    "conversations.info": TIER_3,
    "conversations.list": TIER_2,
    "conversations.replies": TIER_3,
    "conversations.history": TIER_3,
    "users.info": TIER_4,
    "usergroups.list": TIER_2,
    "usergroups.users.list": TIER_2,
    "views.open": TIER_4,
    "views.update": TIER_4,
    "views.publish": TIER_4,
    "files.getUploadURLExternal": TIER_4,
    "files.completeUploadExternal": TIER_4,
    "apps.connections.open": TIER_1,
    "chat.postMessage": int(SenderSettings().posts_per_minute),
}
"""Each method's tier, as Slack's method reference (and java-slack-sdk's MethodsRateLimits) lists it.
chat.postMessage has a workspace-wide limit Slack gives no figure for ("several hundred a minute"):
here it is the sender's own default budget, so a test proves the bot never exceeds that."""
TIER_WINDOW = 60.0
EDIT_GAP = 0.5
_CLOCK_SLACK = 0.05
"""Arrival times jitter by a few ms against the sender's clock; the limits allow for that."""


SLACK_TEAM = "T0TEST"
"""The one workspace this local Slack serves; limits are counted per workspace."""


class SlackApiServer:
    BOT_USER_ID = "U0BOT"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._calls: list[Call] = []
        self._faults: dict[str, deque[Fault]] = {}
        self._ts = itertools.count(1)
        self._closing = threading.Event()
        self.ws_url = ""
        self.usergroups: list[dict[str, Any]] = []
        self.people: dict[str, dict[str, Any]] = {}
        """users.info answers by user ID; anyone else is `user_not_found`."""
        self.channel_list: list[dict[str, Any]] = []
        """conversations.list answers, a page of `limit` at a time with Slack's cursors."""
        self.members: set[str] | None = None
        """Channels the bot is a member of; None: every channel."""
        self.scopes = "commands,chat:write"
        """The token's scopes, sent as `x-oauth-scopes` as Slack does."""
        self.limits = False
        self._shown: dict[tuple[str, str], dict[str, Any]] = {}
        self._posted: list[dict[str, Any]] = []
        """Every posted message as conversations.history shows it (plus its `channel`), in order."""
        self._post_tokens: dict[str, tuple[float, float]] = {}
        self._edited_at: dict[tuple[str, str], float] = {}
        self.post_burst = POST_BURST
        self.tier_limits: dict[str, int] = dict(TIER_LIMITS)
        self._tier_calls: dict[tuple[str, str], deque[float]] = {}
        self.violations: list[str] = []
        """Every request the limits refused, e.g. "chat.postMessage C0DEV"."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    # lifecycle
    def start(self) -> SlackApiServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        """The Web API base URL (what SLACK_API_URL would be); ends with '/'."""
        return f"{self.base}/api/"

    def response_url(self, name: str | None = None) -> str:
        return f"{self.base}/response/{name or uuid.uuid4().hex[:8]}"

    # scripting
    def fail(
        self,
        method: str,
        *,
        times: int = 1,
        status: int = 429,
        retry_after: float | None = 1,
        delay: float = 0.0,
        error: str | None = None,
    ) -> None:
        """The next `times` calls of `method` answer `status` (429 with Retry-After, 500, …),
        optionally after `delay` seconds; status 200 with `error` answers ok=false."""
        with self._lock:
            queue = self._faults.setdefault(method, deque())
            queue.extend(Fault(status, retry_after, delay, error) for _ in range(times))

    def enforce_limits(self, *, post_burst: float = POST_BURST, tiers: dict[str, int] | None = None) -> None:
        """Answer 429 as Slack would from now on; `tiers` replaces calls-per-minute limits."""
        with self._lock:
            self.limits = True
            self.post_burst = post_burst
            self.tier_limits = {**TIER_LIMITS, **(tiers or {})}

    def shown(self, channel: str, ts: str) -> dict[str, Any]:
        """What Slack displays for message `ts` now: {"text", "blocks"}."""
        with self._lock:
            return dict(self._shown[(channel, ts)])

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    # observing
    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str, *, ok_only: bool = False) -> list[Call]:
        return [c for c in self.calls if c.method == method and (not ok_only or c.status == 200)]

    def wait_for(
        self, predicate: Callable[[list[Call]], bool], timeout: float = 5.0, what: str = ""
    ) -> list[Call]:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self._calls), timeout=timeout):
                seen = [(c.method, c.status) for c in self._calls]
                raise AssertionError(f"not seen within {timeout}s: {what or predicate}; calls: {seen}")
            return list(self._calls)

    def wait_for_call(
        self, method: str, where: Callable[[Call], bool] = lambda c: True, timeout: float = 5.0
    ) -> Call:
        calls = self.wait_for(lambda cs: any(c.method == method and where(c) for c in cs), timeout, method)
        return next(c for c in calls if c.method == method and where(c))

    # the HTTP side
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                api._serve(self)

            def do_GET(self) -> None:
                api._serve(self)

        return Handler

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        path = urllib.parse.urlsplit(request.path).path
        method = "response_url" if path.startswith("/response/") else path.removeprefix("/api/")
        if path.startswith("/upload/"):  # step 2 of files_upload_v2: the file's bytes, as they are
            method, body = "upload", {"file_id": path.removeprefix("/upload/"), "data": raw}
        else:
            body = _decode_body(raw, request.headers.get("Content-Type", ""), request.path)
        with self._lock:
            queue = self._faults.get(method)
            fault = queue.popleft() if queue else None
            if fault is None and self.limits:
                fault = self._over_limit(method, body, time.monotonic())
        if fault is not None and fault.delay:
            self._closing.wait(fault.delay)  # a slow Slack; returns early when the server closes
        status, headers, answer = self._answer(method, body, fault)
        headers_seen = {k.lower(): v for k, v in request.headers.items()}
        call = Call(method, body, headers_seen, path, time.monotonic(), status, answer)
        with self._cond:
            self._calls.append(call)
            self._cond.notify_all()
        data = json.dumps(answer).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8")
        request.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)

    def _answer(
        self, method: str, body: dict[str, Any], fault: Fault | None
    ) -> tuple[int, dict[str, str], Any]:
        if fault is None or fault.status == 200:
            scopes = {"x-oauth-scopes": self.scopes}
            if fault is not None and fault.error:
                return 200, scopes, {"ok": False, "error": fault.error}
            return 200, scopes, self._canned(method, body)
        if fault is not None and fault.status == 429:
            headers = {"Retry-After": str(int(fault.retry_after))} if fault.retry_after is not None else {}
            return 429, headers, {"ok": False, "error": "ratelimited"}
        if fault is not None and fault.status >= 500:
            return fault.status, {}, {"ok": False, "error": "internal_error"}
        if fault is not None and fault.error:
            return 200, {}, {"ok": False, "error": fault.error}
        return 200, {}, self._canned(method, body)

    def _over_limit(self, method: str, body: dict[str, Any], now: float) -> Fault | None:
        """Slack's pacing, as a 429 (called under the lock)."""
        channel = str(body.get("channel") or "")
        if method == "chat.postMessage":
            burst = self.post_burst
            tokens, at = self._post_tokens.get(channel, (burst, now))
            tokens = min(burst, tokens + (now - at + _CLOCK_SLACK) * POST_RATE)
            if tokens < 1.0:
                self.violations.append(f"{method} {channel}")
                self._post_tokens[channel] = (tokens, now)
                return Fault(429, math.ceil((1.0 - tokens) / POST_RATE))
            self._post_tokens[channel] = (tokens - 1.0, now)
        elif method == "chat.update":
            key = (channel, str(body.get("ts") or ""))
            last = self._edited_at.get(key)
            if last is not None and now - last < EDIT_GAP - _CLOCK_SLACK:
                self.violations.append(f"{method} {key[1]} again after {now - last:.3f}s")
                return Fault(429, 1)
        refused = self._over_tier(method, now)
        if refused is None and method == "chat.update":
            self._edited_at[(channel, str(body.get("ts") or ""))] = now
        return refused

    def _over_tier(self, method: str, now: float) -> Fault | None:
        """A Tier method's calls in the rolling minute, per workspace (the one team here)."""
        limit = self.tier_limits.get(method)
        if limit is None:
            return None
        window = self._tier_calls.setdefault((SLACK_TEAM, method), deque())
        while window and window[0] <= now - TIER_WINDOW + _CLOCK_SLACK:
            window.popleft()
        if len(window) >= limit:
            wait = window[0] + TIER_WINDOW - now
            self.violations.append(f"{method} call {len(window) + 1} within a minute")
            return Fault(429, max(1, math.ceil(wait)))
        window.append(now)
        return None

    def tier_peaks(self) -> dict[str, int]:
        """Per method, the most accepted calls seen in any rolling minute (for the figures)."""
        peaks: dict[str, int] = {}
        by_method: dict[str, list[float]] = {}
        for call in self.calls:
            if call.status == 200:
                by_method.setdefault(call.method, []).append(call.at)
        for method, times in by_method.items():
            times.sort()
            start = 0
            for end, at in enumerate(times):
                while times[start] <= at - TIER_WINDOW:
                    start += 1
                peaks[method] = max(peaks.get(method, 0), end - start + 1)
        return peaks

    def _canned(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://scalebot-test.slack.com/",
                "team": "Test",
                "user": "scalebot",
                "team_id": SLACK_TEAM,
                "user_id": self.BOT_USER_ID,
                "bot_id": "B0BOT",
                "is_enterprise_install": False,
            }
        channel = str(body.get("channel") or "")
        posting = method in ("chat.postMessage", "chat.update", "chat.postEphemeral")
        public_ok = "chat:write.public" in self.scopes.split(",")  # every test channel is public
        # A user ID as the channel is the app's direct message with that person: always allowed.
        direct = method == "chat.postMessage" and channel[:1] in ("U", "W")
        if (
            posting
            and self.members is not None
            and channel not in self.members
            and not public_ok
            and not direct
        ):
            return {"ok": False, "error": "not_in_channel"}
        if method == "conversations.info":
            member = self.members is None or channel in self.members
            info = {"id": channel, "is_channel": True, "is_private": False, "is_member": member}
            return {"ok": True, "channel": info}
        if method == "chat.postMessage":
            ts = f"1700000000.{next(self._ts):06d}"
            with self._lock:
                self._shown[(channel, ts)] = {"text": body.get("text"), "blocks": _blocks(body)}
                self._posted.append({**_posted_message(body, ts), "posted_at": time.time()})
            return {
                "ok": True,
                "channel": body.get("channel"),
                "ts": ts,
                "message": {"text": body.get("text")},
            }
        if method == "chat.update":
            with self._lock:
                shown = self._shown.setdefault((channel, str(body.get("ts"))), {"text": "", "blocks": []})
                shown["text"] = body.get("text")
                if "blocks" in body:  # Slack keeps a message's blocks unless the edit replaces them
                    shown["blocks"] = _blocks(body)
            return {
                "ok": True,
                "channel": body.get("channel"),
                "ts": body.get("ts"),
                "text": body.get("text"),
            }
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"1700000000.{next(self._ts):06d}"}
        if method == "apps.connections.open":
            return {"ok": True, "url": self.ws_url}
        if method in ("views.open", "views.update", "views.publish"):
            view = body.get("view")
            view = json.loads(view) if isinstance(view, str) else dict(view or {})
            return {
                "ok": True,
                "view": {**view, "id": body.get("view_id") or "V0TEST", "hash": "1700000000.abcdef"},
            }
        if method == "chat.getPermalink":
            ts = str(body.get("message_ts") or "").replace(".", "")
            return {"ok": True, "permalink": f"https://scalebot-test.slack.com/archives/{channel}/p{ts}"}
        if method == "files.getUploadURLExternal":  # step 1 of files_upload_v2
            file_id = f"F0{next(self._ts):06d}"
            return {"ok": True, "upload_url": f"{self.base}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":  # step 3: shares the uploaded files
            files = body.get("files") or "[]"
            listed = json.loads(files) if isinstance(files, str) else files
            return {"ok": True, "files": [{"id": f["id"], "title": f.get("title", "")} for f in listed]}
        if method == "usergroups.list":
            return {"ok": True, "usergroups": self.usergroups}
        if method == "users.info":
            person = self.people.get(str(body.get("user") or ""))
            return {"ok": True, "user": person} if person else {"ok": False, "error": "user_not_found"}
        if method in ("conversations.history", "conversations.replies"):
            return self._read_messages(method, channel, body)
        if method == "conversations.list":
            start, limit = int(body.get("cursor") or 0), int(body.get("limit") or 100)
            page = self.channel_list[start : start + limit]
            more = start + limit < len(self.channel_list)
            return {
                "ok": True,
                "channels": page,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""},
            }
        return {"ok": True}

    def _read_messages(self, method: str, channel: str, body: dict[str, Any]) -> dict[str, Any]:
        oldest, limit = float(body.get("oldest") or 0), int(body.get("limit") or 100)
        thread = str(body.get("ts") or "")
        with_metadata = str(body.get("include_all_metadata")).lower() in ("true", "1")
        with self._lock:
            mine = [m for m in self._posted if m["channel"] == channel and m["posted_at"] > oldest]
        if method == "conversations.replies":
            if not thread:
                return {"ok": False, "error": "invalid_arguments"}
            found = [m for m in mine if thread in (m["ts"], m.get("thread_ts"))]
        else:  # the channel's own messages: a reply shows there only when broadcast
            found = [m for m in reversed(mine) if "thread_ts" not in m or m.get("subtype")]
        messages = [
            {
                k: v
                for k, v in m.items()
                if k not in ("channel", "posted_at") and (with_metadata or k != "metadata")
            }
            for m in found[:limit]
        ]
        return {"ok": True, "messages": messages, "has_more": len(found) > limit}


def _posted_message(body: dict[str, Any], ts: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "message",
        "channel": str(body.get("channel") or ""),
        "ts": ts,
        "text": body.get("text"),
        "bot_id": "B0BOT",
    }
    if body.get("thread_ts"):
        message["thread_ts"] = str(body["thread_ts"])
        if str(body.get("reply_broadcast")).lower() in ("true", "1"):
            message["subtype"] = "thread_broadcast"
    metadata = body.get("metadata")
    if metadata:
        message["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
    return message


def _blocks(body: dict[str, Any]) -> list[Any]:
    blocks = body.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _decode_body(raw: bytes, content_type: str, path: str) -> dict[str, Any]:
    if not raw:
        query = urllib.parse.urlsplit(path).query
        return {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
    text = raw.decode("utf-8")
    if "json" in content_type or text.startswith("{"):
        data = json.loads(text)
        return data if isinstance(data, dict) else {"_": data}
    return {k: v[0] for k, v in urllib.parse.parse_qs(text, keep_blank_values=True).items()}


# -- blocks in recorded calls ----------------------------------------------------------------------


def blocks_of(call: Call) -> list[dict[str, Any]]:
    blocks = call.body.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def all_text(call: Call) -> str:
    """Every text of a recorded message (fallback and blocks), for substring assertions."""
    return "\n".join(texts_of(call))


def texts_of(call: Call) -> list[str]:
    """The fallback `text` (empty when there is none), then each text of the blocks."""
    parts = [str(call.body.get("text") or "")]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "text" and isinstance(item, str):
                    parts.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(blocks_of(call))
    return parts


def buttons_of(call: Call) -> list[dict[str, Any]]:
    return [e for b in blocks_of(call) if b.get("type") == "actions" for e in b.get("elements", [])]


# -- Socket Mode ----------------------------------------------------------------------------------


class SocketModeServer:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._connections: list[ServerConnection] = []
        self.acks: list[dict[str, Any]] = []
        self._server = serve(self._handle, "127.0.0.1", 0, compression=None, ping_interval=None)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> SocketModeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        port = self._server.socket.getsockname()[1]
        return f"ws://127.0.0.1:{port}/link/?ticket={uuid.uuid4().hex}&app_id=A0TEST"

    @property
    def connection_count(self) -> int:
        with self._cond:
            return len(self._connections)

    def _handle(self, connection: ServerConnection) -> None:
        with self._cond:
            self._connections.append(connection)
            self._cond.notify_all()
        connection.send(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {
                        "host": "applink-local",
                        "build_number": 1,
                        "approximate_connection_time": 18060,
                    },
                    "connection_info": {"app_id": "A0TEST"},
                }
            )
        )
        try:
            for raw in connection:
                message = json.loads(raw)
                if isinstance(message, dict) and "envelope_id" in message:
                    with self._cond:
                        self.acks.append(message)
                        self._cond.notify_all()
        except Exception:  # the client went away; the test decides whether that was expected
            return

    def wait_connections(self, count: int, timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._connections) >= count, timeout=timeout):
                raise AssertionError(
                    f"expected {count} Socket Mode connections, saw {len(self._connections)}"
                )

    def push(
        self, envelope_type: str, payload: dict[str, Any], *, accepts_response_payload: bool = True
    ) -> str:
        """Send an envelope on the newest connection; returns its envelope_id."""
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": envelope_type,
            "accepts_response_payload": accepts_response_payload,
        }
        with self._cond:
            connection = self._connections[-1]
        connection.send(json.dumps(envelope))
        return envelope_id

    def disconnect(self, reason: str = "refresh_requested") -> None:
        with self._cond:
            connection = self._connections[-1]
        connection.send(
            json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-local"}})
        )

    def wait_for_ack(self, envelope_id: str, timeout: float = 5.0) -> dict[str, Any]:
        with self._cond:
            if not self._cond.wait_for(
                lambda: any(a["envelope_id"] == envelope_id for a in self.acks), timeout
            ):
                raise AssertionError(f"envelope {envelope_id} not acknowledged within {timeout}s")
            return next(a for a in self.acks if a["envelope_id"] == envelope_id)


# -- signing and payloads -------------------------------------------------------------------------


@dataclass
class Signer:
    secret: str
    team_id: str = "T0TEST"
    api_app_id: str = "A0TEST"
    clock: Callable[[], float] = time.time
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def headers(
        self, body: bytes, *, timestamp: int | None = None, signature: str | None = None
    ) -> dict[str, str]:
        ts = str(int(self.clock()) if timestamp is None else timestamp)
        base = b"v0:" + ts.encode() + b":" + body
        digest = hmac.new(self.secret.encode(), base, hashlib.sha256).hexdigest()
        return {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": signature or f"v0={digest}",
        }

    def slash_command_fields(
        self, text: str, *, user_id: str, channel_id: str, response_url: str, command: str = "/scale"
    ) -> dict[str, str]:
        """All 13 fields Slack sends for a slash command, in Slack's order."""
        n = next(self._counter)
        return {
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",  # the deprecated verification token: never used
            "team_id": self.team_id,
            "team_domain": "scalebot-test",
            "channel_id": channel_id,
            "channel_name": "platform",
            "user_id": user_id,
            "user_name": user_id.lower(),
            "command": command,
            "text": text,
            "api_app_id": self.api_app_id,
            "is_enterprise_install": "false",
            "response_url": response_url,
            "trigger_id": f"{n}.1234567890.abcdef{n:06d}",
        }

    def slash_command(self, text: str, **kwargs: Any) -> bytes:
        return urllib.parse.urlencode(self.slash_command_fields(text, **kwargs)).encode()

    def block_actions_payload(
        self,
        action_id: str,
        value: str,
        *,
        user_id: str,
        channel_id: str,
        message_ts: str,
        response_url: str,
        block_id: str = "actions-1",
    ) -> dict[str, Any]:
        n = next(self._counter)
        return {
            "type": "block_actions",
            "user": {
                "id": user_id,
                "username": user_id.lower(),
                "name": user_id.lower(),
                "team_id": self.team_id,
            },
            "api_app_id": self.api_app_id,
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel_id,
                "is_ephemeral": False,
            },
            "trigger_id": f"{n}.1234567890.fedcba{n:06d}",
            "team": {"id": self.team_id, "domain": "scalebot-test"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel_id, "name": "platform"},
            "message": {"type": "message", "ts": message_ts, "text": "card", "blocks": []},
            "state": {"values": {}},
            "response_url": response_url,
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "text": {"type": "plain_text", "text": "Approve", "emoji": True},
                    "value": value,
                    "style": "primary",
                    "type": "button",
                    "action_ts": f"{int(self.clock())}.{n:06d}",
                }
            ],
        }

    def block_actions(self, action_id: str, value: str, **kwargs: Any) -> bytes:
        payload = self.block_actions_payload(action_id, value, **kwargs)
        return ("payload=" + urllib.parse.quote(json.dumps(payload))).encode()

    def view_submission_payload(
        self, view: dict[str, Any], values: dict[str, Any], *, user_id: str
    ) -> dict[str, Any]:
        """A modal's submission as Slack sends it: the view that was opened, with `state.values`."""
        return {
            "type": "view_submission",
            "team": {"id": self.team_id, "domain": "scalebot-test"},
            "user": {
                "id": user_id,
                "username": user_id.lower(),
                "name": user_id.lower(),
                "team_id": self.team_id,
            },
            "api_app_id": self.api_app_id,
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",
            "trigger_id": f"{next(self._counter)}.1234567890.view",
            "view": {
                "id": "V0TEST",
                "team_id": self.team_id,
                "type": "modal",
                "callback_id": view["callback_id"],
                "private_metadata": view.get("private_metadata", ""),
                "state": {"values": values},
                "hash": "1700000000.abcdef",
                "blocks": view["blocks"],
            },
            "response_urls": [],
            "is_enterprise_install": False,
        }

    def event(self, event: dict[str, Any]) -> bytes:
        """An Events API callback as Slack posts it over HTTP (JSON)."""
        n = next(self._counter)
        envelope = {
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",
            "team_id": self.team_id,
            "api_app_id": self.api_app_id,
            "event": {**event, "event_ts": f"{int(self.clock())}.{n:06d}"},
            "type": "event_callback",
            "event_id": f"Ev{n:08d}",
            "event_time": int(self.clock()),
            "authorizations": [{"team_id": self.team_id, "user_id": "U0BOT", "is_bot": True}],
            "is_ext_shared_channel": False,
        }
        return json.dumps(envelope).encode()

    def view_submission(self, view: dict[str, Any], values: dict[str, Any], *, user_id: str) -> bytes:
        payload = self.view_submission_payload(view, values, user_id=user_id)
        return ("payload=" + urllib.parse.quote(json.dumps(payload))).encode()


@dataclass(frozen=True)
class HttpResult:
    status: int
    body: str
    elapsed: float

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def post(url: str, body: bytes, headers: dict[str, str], timeout: float = 10.0) -> HttpResult:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            return HttpResult(response.status, text, time.monotonic() - started)
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        error.close()
        return HttpResult(error.code, text, time.monotonic() - started)


def get(url: str, timeout: float = 5.0) -> HttpResult:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return HttpResult(response.status, response.read().decode(), time.monotonic() - started)
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        error.close()
        return HttpResult(error.code, text, time.monotonic() - started)


def wait_until(
    predicate: Callable[[], bool], timeout: float = 5.0, what: str = "", poll: float = 0.01
) -> None:
    """Poll a predicate with a deadline, for state that has no Condition to wait on."""
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout}s: {what or predicate}")
        event.wait(poll)


def methods(calls: Sequence[Call]) -> list[str]:
    return [c.method for c in calls]
