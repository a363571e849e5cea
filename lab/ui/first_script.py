"""A script the lab's page runs before Gradio's own (ASGI middleware: it goes first in the <head> of
the page itself; Gradio's `head` is added by its scripts, too late for this).

Gradio's status tracker counts a pending event's seconds on every animation frame, and on every
page (an empty gr.Blocks too, Gradio 6.31) one tracker goes on asking for frames after the page has
loaded, with nothing pending: an idle tab drew 60 frames a second (the idle-page test in
tests/test_browser.py counts them; benchmarks/idle_tab.py measures what an idle tab costs). Its
clock shows tenths of a second, so the tracker's frames come ten a second instead; every other
animation keeps its frames."""
from __future__ import annotations

from lab.ui.access import app_path

CALM_CLOCK = b"""<script>
(() => {
  const frame = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) => {
    if (!/\\/statustracker-[^/]*\\.js/.test(new Error().stack || "")) return frame(callback);
    return setTimeout(() => callback(performance.now()), 100);
  };
})();
</script>"""


class FirstScript:
    """ASGI middleware: CALM_CLOCK first in the <head> of the page (the app's root, GET); every
    other answer (files, the API, a downloaded report) passes as it is."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET" or app_path(scope) != "/":
            return await self.app(scope, receive, send)
        held: dict = {}

        async def first(message):
            if message["type"] == "http.response.start" and _plain_html(message["headers"]):
                held["start"], held["body"] = message, []
                return
            if message["type"] != "http.response.body" or "start" not in held:
                return await send(message)
            held["body"].append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = b"".join(held["body"]).replace(b"<head>", b"<head>" + CALM_CLOCK, 1)
            headers = [(k, v) for k, v in held["start"]["headers"] if k.lower() != b"content-length"]
            await send({**held["start"], "headers": headers + [(b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})
        await self.app(scope, receive, first)


def _plain_html(headers) -> bool:
    named = {k.lower(): v for k, v in headers}
    return named.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in named
