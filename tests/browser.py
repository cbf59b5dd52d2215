"""A headless Chromium driven over the DevTools protocol, for the tests of the HTML report.

``Browser`` starts Chromium (Debian's ``chromium``, installed by the Makefile's ``build/.chromium``) with
``--remote-debugging-port=0``, connects to its page with a websocket (``websocket-client``), and records every
console error and uncaught exception while it loads pages, runs JavaScript and takes screenshots.
"""
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium():
    """The path of a Chromium executable, or None."""
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


class Browser:
    """One headless Chromium with one page. Use as a context manager; ``errors`` lists console errors and
    uncaught exceptions (as text) seen since start."""

    def __init__(self, executable, width=1400, height=1000, timeout=20.0):
        import websocket  # websocket-client (requirements-dev.txt)

        self.timeout, self.errors, self._id = timeout, [], 0
        self._profile = tempfile.mkdtemp(prefix="thunder-chromium-")
        self._process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={self._profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._devtools_port()
        # Keep reading Chromium's stderr (its log), so that a full pipe never blocks it.
        threading.Thread(target=self._process.stderr.read, daemon=True).start()
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout))
        page = next(p for p in pages if p["type"] == "page")
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def _devtools_port(self):
        """Reads 'DevTools listening on ws://127.0.0.1:<port>/...' from Chromium's stderr."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            line = self._process.stderr.readline()
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if match:
                return int(match.group(1))
            if not line and self._process.poll() is not None:
                break
        raise RuntimeError("chromium did not start its DevTools server")

    def _record(self, message):
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", "?"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])

    def send(self, method, **params):
        """Sends a DevTools command and returns its result (recording events that arrive meanwhile)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._record(message)

    def _wait_for(self, event):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            message = json.loads(self._ws.recv())
            self._record(message)
            if message.get("method") == event:
                return message["params"]
        raise TimeoutError(f"no {event} within {self.timeout} s")

    def load(self, path):
        """Opens a local file and waits until it has loaded."""
        self.send("Page.navigate", url="file://" + os.path.abspath(path))
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression):
        """Runs JavaScript in the page and returns its (JSON-serializable) value; raises on an exception."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path, full_page=False):
        """Saves a PNG of the window (or of the whole page) to ``path``."""
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=full_page)["data"]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self._ws.close()
        finally:
            self._process.kill()
            self._process.wait()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
