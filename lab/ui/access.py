"""The login in front of the web lab (LAB_AUTH): before a person logs in, the server answers only the
login page, the files it draws with, and the login itself; and failed logins from one client
address make that address wait before its next try, while every other address logs in as before.

Gradio checks the login on most of its routes but not all (FastAPI's /openapi.json, the run-history
page, /gradio_api/startup-events, /gradio_api/app_id, the heartbeat, cancel and stream routes, ...),
so the gate stands in front of every route, those a later Gradio adds included: what it does not
name below is refused without the login cookie.
"""
from __future__ import annotations

import ipaddress
import json
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from starlette.requests import HTTPConnection

# what the login page needs before login: the page, its scripts, styles and fonts, the login itself
OPEN_PATHS = {"/", "/theme.css", "/favicon.ico"}
LOGIN_PATHS = {"/login", "/login/"}
STARTING = "/gradio_api/startup-events"      # launch() calls it once, without a login, as it starts
OPEN_PREFIXES = ("/assets/", "/static/")


@dataclass
class Throttle:
    """Failed logins per client address: after `free` tries an address waits `first_wait_s` before
    its next, twice as long after each further failure, at most `max_wait_s`; a login that
    succeeds clears its address. A try made while it must wait is refused unchecked and does not
    count. At most `max_addresses` are remembered (the longest untried go first), each for
    `forget_s` after its last try, so an attacker cycling addresses cannot grow the table."""
    free: int = 5
    first_wait_s: float = 1.0
    max_wait_s: float = 300.0
    forget_s: float = 3600.0
    max_addresses: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _seen: OrderedDict = field(default_factory=OrderedDict)     # address -> (tries, until, last)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, address: str) -> float:
        """Seconds `address` must still wait (0: it may try now, and the try is counted)."""
        now = self.clock()
        with self._lock:
            tries, until, last = self._seen.pop(address, (0, 0.0, now))
            if now - last > self.forget_s:
                tries, until = 0, 0.0
            if now < until:
                self._seen[address] = (tries, until, last)
                return until - now
            tries += 1
            if tries > self.free:
                until = now + min(self.first_wait_s * 2 ** (tries - self.free - 1), self.max_wait_s)
            self._seen[address] = (tries, until, now)
            while len(self._seen) > self.max_addresses:
                self._seen.popitem(last=False)
            return 0.0

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._seen.pop(address, None)

    def __len__(self) -> int:
        return len(self._seen)


def client_address(scope) -> str:
    """Who is trying: the client's IP address; an IPv6 one by its /64 network (one machine's
    share), so that one client cannot try from a fresh address each time; an IPv4 client of a
    dual-stack server by its IPv4 address."""
    host = (scope.get("client") or ("unknown", 0))[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.version == 6 and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)


def app_path(scope) -> str:
    """The request's path within the app (behind a proxy's root path: without it)."""
    root, path = scope.get("root_path") or "", scope["path"]
    return (path[len(root):] or "/") if root and path.startswith(root) else path


def _logged_in(scope) -> bool:
    """Whether the request carries a login cookie Gradio issued (or the app has no login)."""
    app = scope.get("app")
    if getattr(app, "auth", None) is None:
        return True
    cookies = HTTPConnection(scope).cookies
    token = (cookies.get(f"access-token-{app.cookie_id}")
             or cookies.get(f"access-token-unsecure-{app.cookie_id}"))
    return token is not None and token in app.tokens


def _open_before_login(scope, path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or (
        path == STARTING and not getattr(scope["app"], "startup_events_triggered", True))


async def _answer(send, status: int, detail: str, headers: dict | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class LoginGate:
    """ASGI middleware: the login page and the login for everyone, everything else for those
    logged in; the login itself throttled per client address (Throttle)."""

    def __init__(self, app, throttle: Throttle | None = None):
        self.app, self.throttle = app, throttle or Throttle()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        path, http = app_path(scope), scope["type"] == "http"
        if http and path in LOGIN_PATHS and scope["method"] == "POST":
            return await self._login(scope, receive, send)          # logged in or not
        if _logged_in(scope) or http and _open_before_login(scope, path):
            return await self.app(scope, receive, send)
        if not http:
            return await send({"type": "websocket.close", "code": 1008})
        await _answer(send, 401, "not logged in: log in at the lab's address first")

    async def _login(self, scope, receive, send):
        address = client_address(scope)
        wait = self.throttle.wait(address)
        if wait > 0:
            return await _answer(
                send, 429, f"too many failed logins from {address}: try again in "
                           f"{math.ceil(wait)} s", {"retry-after": str(math.ceil(wait))})

        async def watch(message):
            if message["type"] == "http.response.start" and message["status"] == 200:
                self.throttle.succeeded(address)
            await send(message)
        await self.app(scope, receive, watch)
