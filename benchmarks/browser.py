"""A real headless Chromium driven over the Chrome DevTools Protocol (a websocket, `websockets`' sync client).

The system's `chromium` (Debian: `apt-get install chromium`; `make chromium` as root) is started with
`--remote-debugging-port=0`; its DevTools endpoint is read from its stderr. `Page` navigates, waits until the page's
DOM text shows what the caller expects (a single-page app renders after load: the text is the proof it rendered),
reads that text, and captures PNG screenshots. No browser is downloaded: what runs is the installed binary.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEVTOOLS_LINE = re.compile(r"DevTools listening on (ws://\S+)")
START_TIMEOUT_S = 30.0


class BrowserError(RuntimeError):
    """The browser could not start, or a page did not show what was expected in time."""


def find_chromium() -> str | None:
    """The path of an installed Chromium or Chrome binary, or None."""
    return next((path for path in map(shutil.which, BINARIES) if path), None)


class Page:
    """One tab: CDP commands over its websocket (events are read and dropped while waiting for a reply)."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket, self._ids = socket, itertools.count(1)

    def send(self, method: str, timeout_s: float = 60.0, **params: Any) -> dict[str, Any]:
        """Run one CDP command and return its result; BrowserError with the protocol's message on an error."""
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") != ident:
                continue
            if "error" in message:
                raise BrowserError(f"{method} failed: {message['error']}")
            return message.get("result", {})

    def set_viewport(self, width_px: int, height_px: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width_px, height=height_px, deviceScaleFactor=1,
                  mobile=False)

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluating {expression[:80]!r} failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element matching the CSS `selector` and type `text` into it as a user would (CDP
        Input.insertText: the app sees real input events); BrowserError when nothing matches."""
        found = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                              "if (e) e.focus(); return !!e; })()")
        if not found:
            raise BrowserError(f"no element matches {selector!r} to type into")
        self.send("Input.insertText", text=text)

    def text(self) -> str:
        """The rendered text of the page (`document.body.innerText`)."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for(self, shown: Callable[[str], bool], what: str, timeout_s: float = 60.0,
                 settle_s: float = 1.0) -> str:
        """The page's text once `shown(text)` holds and the text stayed the same for `settle_s` (the app has finished
        rendering what it loaded); BrowserError naming `what` and quoting the text after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if shown(text):
                time.sleep(settle_s)
                if self.text() == text:
                    return text
                continue
            time.sleep(0.25)
        raise BrowserError(f"the page did not show {what} within {timeout_s} s; its text was: {text[:1500]!r}")

    def screenshot(self, path: Path) -> Path:
        """The viewport as a PNG at `path`."""
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


@contextmanager
def headless_chromium(binary: str | None = None, *, width_px: int = 1600, height_px: int = 1000) -> Iterator[Page]:
    """A headless Chromium with one blank tab, its profile in a temporary folder; stopped (and the folder removed)
    on exit. BrowserError when no binary is installed or it does not start."""
    binary = binary or find_chromium()
    if binary is None:
        raise BrowserError("no Chromium installed: apt-get install chromium (or `make chromium` as root)")
    # Chromium's helpers (crashpad, zygote) may still write the profile for a moment after the browser is gone: the
    # whole session is killed on exit, and a file they leave behind does not fail the caller (a CI run did).
    with tempfile.TemporaryDirectory(prefix="harnessrl-chromium-", ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--remote-debugging-port=0",
             "--remote-allow-origins=*", f"--user-data-dir={profile}", f"--window-size={width_px},{height_px}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            browser_ws = _devtools_url(process)
            with connect(_page_ws(browser_ws), max_size=None, open_timeout=START_TIMEOUT_S) as socket:
                page = Page(socket)
                page.set_viewport(width_px, height_px)
                yield page
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)


def _devtools_url(process: subprocess.Popen) -> str:
    """The browser's DevTools websocket URL, read from its stderr (Chromium prints it once listening)."""
    seen: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    assert process.stderr is not None
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        match = DEVTOOLS_LINE.search(line)
        if match:  # keep draining its stderr, or a chatty browser blocks on a full pipe
            threading.Thread(target=process.stderr.read, name="chromium-stderr", daemon=True).start()
            return match.group(1)
    raise BrowserError(f"chromium did not start its DevTools endpoint (exit {process.poll()}): {''.join(seen)[-2000:]}")


def _page_ws(browser_ws: str) -> str:
    """The websocket URL of the browser's first page tab (from its /json/list)."""
    http_base = "http://" + browser_ws.removeprefix("ws://").split("/", 1)[0]
    targets = httpx.get(f"{http_base}/json/list", timeout=10).json()
    pages = [t for t in targets if t.get("type") == "page"]
    if not pages:
        raise BrowserError(f"chromium has no page tab to drive: {targets}")
    return pages[0]["webSocketDebuggerUrl"]
