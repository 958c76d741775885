"""Open a local page in headless Chromium and report what happened, with the standard library only.

Chromium speaks the DevTools protocol over two pipes (``--remote-debugging-pipe``: it reads
NUL-terminated JSON on fd 3 and writes on fd 4), so no websocket client or pip package is
needed. :func:`open_page` loads a file, records console messages, uncaught exceptions and every
network request the page made, and takes a full-page PNG screenshot.

Run as a script to refresh the README's screenshot of a report (the top of the page, which
keeps the PNG a few hundred KB)::

    python -m tests.headless_chromium out/report.html docs/report.png 2400   # docs/make_screenshot.py does it all
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Without the networking switches Chromium phones home at start-up (component updates, sync,
# field trials), which a closed network refuses and which would pollute the request log.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageVisit:
    url: str
    console: list[dict] = field(default_factory=list)      # {"level", "text"}
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)     # every URL the page asked for
    failed_requests: list[str] = field(default_factory=list)
    size: tuple[int, int] = (0, 0)                         # full page, CSS pixels

    @property
    def errors(self) -> list[str]:
        return self.exceptions + [m["text"] for m in self.console if m["level"] in ("error", "assert")]


class _Pipe:
    """A DevTools session over Chromium's debugging pipes."""

    def __init__(self, binary: str, profile: str, width: int, height: int) -> None:
        def high(fd: int) -> int:  # keep our ends clear of fds 3 and 4, which the child needs
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            return moved

        to_child_r, to_child_w = map(high, os.pipe())
        from_child_r, from_child_w = map(high, os.pipe())

        def child_fds() -> None:
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=child_fds, close_fds=False,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.write_fd, self.read_fd = to_child_w, from_child_r
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self._read(deadline))

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (status {self.process.poll()})")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.write_fd)
        os.close(self.read_fd)


def open_page(page: str | Path, screenshot: str | Path | None = None, *, width: int = 1280,
              max_height: int | None = None, binary: str | None = None) -> PageVisit:
    """Load ``page`` (a local file) and return what it logged and requested; optionally save a
    full-page PNG screenshot at ``width`` CSS pixels (the top ``max_height`` pixels if given)."""
    binary = binary or chromium_binary()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    url = Path(page).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="guardscope-chromium-") as profile:
        pipe = _Pipe(binary, profile, width, 900)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.events.clear()
            pipe.call("Page.navigate", {"url": url}, session=session)
            pipe.wait_for("Page.loadEventFired")
            metrics = pipe.call("Page.getLayoutMetrics", session=session)
            content = metrics.get("cssContentSize") or metrics["contentSize"]
            size = (int(content["width"]), int(content["height"]))
            if screenshot is not None:
                shot = pipe.call("Page.captureScreenshot", {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": size[0], "height": min(size[1], max_height or size[1]),
                             "scale": 1},
                }, session=session, timeout=60)
                Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
            visit = PageVisit(url=url, size=size)
            for event in pipe.events:
                params = event.get("params", {})
                method = event.get("method")
                if method == "Runtime.consoleAPICalled":
                    text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                    visit.console.append({"level": params.get("type"), "text": text})
                elif method == "Log.entryAdded":
                    entry = params["entry"]
                    visit.console.append({"level": entry.get("level"), "text": entry.get("text", "")})
                elif method == "Runtime.exceptionThrown":
                    visit.exceptions.append(params["exceptionDetails"].get("text", "exception"))
                elif method == "Network.requestWillBeSent":
                    visit.requests.append(params["request"]["url"])
                elif method == "Network.loadingFailed":
                    visit.failed_requests.append(params.get("errorText", ""))
            return visit
        finally:
            pipe.close()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python -m tests.headless_chromium PAGE.html SCREENSHOT.png [MAX_HEIGHT]")
    result = open_page(sys.argv[1], sys.argv[2], max_height=int(sys.argv[3]) if len(sys.argv) == 4 else None)
    print(f"{result.size[0]}x{result.size[1]} px; requests {result.requests}; errors {result.errors}")
