"""Drive headless Chromium over the Chrome DevTools Protocol on a pipe
(``--remote-debugging-pipe``: the browser reads commands on fd 3 and writes
replies and events on fd 4, JSON messages ended by NUL). No port is opened, no
browser is downloaded: Debian's ``chromium`` from PATH (or $CHROMIUM).

    with Browser() as b:
        page = b.open("file:///tmp/x.html", offline=True)
        page.evaluate("document.title"); page.screenshot("shot.png")
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, binary: str | None = None, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise CDPError("no Chromium found (apt-get install -y chromium, or set CHROMIUM)")
        self.timeout = timeout
        self._next = 0
        self._buf = b""
        self.events: list[dict] = []

    def __enter__(self) -> "Browser":
        self._profile = tempfile.TemporaryDirectory(prefix="commtrace-chromium-")
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()

        def fds_3_and_4():
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [self.binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
                "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--window-size=1400,1000",
                f"--user-data-dir={self._profile.name}", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, pass_fds=(3, 4), preexec_fn=fds_3_and_4)
        os.close(to_browser_r)
        os.close(from_browser_w)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        self._profile.cleanup()

    # -- the protocol -------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise CDPError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._r], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise CDPError("Chromium closed the pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        self._next += 1
        mid = self._next
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            m = self._read_message(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, session: str | None = None, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        for i, m in enumerate(self.events):
            if m.get("method") == method and (session is None or m.get("sessionId") == session):
                return self.events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method and (session is None or m.get("sessionId") == session):
                return m
            self.events.append(m)

    def open(self, url: str, offline: bool = True) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        if offline:
            page.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                           "downloadThroughput": -1, "uploadThroughput": -1})
        page.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", session)
        return page


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        return self.browser.send(method, params, self.session, timeout)

    def evaluate(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise CDPError(f"{expression[:80]}: {r['exceptionDetails'].get('text')} "
                           f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while True:
            v = self.evaluate(expression)
            if v:
                return v
            if time.monotonic() > deadline:
                raise CDPError(f"timed out waiting for {expression}")
            time.sleep(0.05)

    def mouse(self, kind: str, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left" if kind != "mouseMoved"
                                               else "none", "clickCount": 1 if kind != "mouseMoved" else 0})

    def screenshot(self, path: str, full_page: bool = False) -> str:
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        data = self.send("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries and network requests
        (other than file: and data:) seen so far on this page."""
        out = []
        for m in self.browser.events:
            if m.get("sessionId") != self.session:
                continue
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif meth == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif meth == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
            elif meth == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not url.startswith(("file:", "data:", "about:", "blob:")):
                    out.append("network: " + url)
        return out
