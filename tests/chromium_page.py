"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: no
port, no websocket library, no driver): open a local page with the network cut off, and collect
what it logged, threw and requested. Used by tests/test_report_browser.py; also a script,
``python tests/chromium_page.py PAGE.html SHOT.png``, to look at a report as a browser draws it."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["chromium_path", "Page"]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--mute-audio",
         # offline: no name resolves and every connection goes to a closed local port
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def chromium_path() -> str | None:
    """The Chromium binary (``KVSIM_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH)."""
    named = os.environ.get("KVSIM_CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One tab of a fresh headless Chromium (its own temporary profile); use as a context manager.

    ``events`` holds every protocol event received, in order: ``console_errors`` and
    ``requests`` read them."""

    def __init__(self, binary: str, width: int = 1200, height: int = 900, timeout_s: float = 60.0) -> None:
        self._timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="kvsim-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def pipes() -> None:  # the browser reads commands on fd 3 and writes on fd 4
            import fcntl

            # moved above 4 first: one of them may be 3 or 4 itself
            read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w))
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=pipes)  # 3 and 4: made by pipes(), kept open across exec
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                  session=None)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", session=None)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed its pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None | bool = True) -> Any:
        """Send a protocol command (to the page's session unless ``session=None``) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is True:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self._timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout_s: float | None = None) -> dict[str, Any]:
        """The first event ``method`` received (already, or within ``timeout_s``)."""
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + (timeout_s or self._timeout_s)
        while True:
            event = self._read(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def open(self, path: Path) -> None:
        """Load the local file ``path`` and wait for its load event."""
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript ``expression`` in the page (JSON-able values)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page (beyond the viewport) as a PNG."""
        import base64

        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        Path(path).write_bytes(base64.b64decode(shot["data"]))

    def console_errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and browser log errors, as text."""
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                out.append(str(params.get("exceptionDetails", {})))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                out.append(params["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        """The URLs the page requested (a data: URI shortened to its scheme)."""
        urls = [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]
        return ["data:" if url.startswith("data:") else url for url in urls]


if __name__ == "__main__":
    binary = chromium_path()
    if binary is None:
        sys.exit("no chromium found (apt-get install chromium, or set KVSIM_CHROMIUM)")
    with Page(binary) as page:
        page.open(Path(sys.argv[1]))
        page.screenshot(Path(sys.argv[2]))
        print("console:", page.console_errors())
        print("requests:", page.requests())
