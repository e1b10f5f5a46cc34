"""The documentation site: `mkdocs build --strict` fails on a broken link, a missing anchor or a page left out of the
nav, and the built site renders in a real browser with no console error.

The browser is Debian's `chromium` (`make browser` installs it), driven over the DevTools protocol with
websocket-client. Not Playwright or Selenium: both drive a browser through a driver of their own (Playwright's
node driver and the browser builds it downloads, or a chromedriver matching the browser's version), which an
offline machine cannot fetch; the DevTools protocol is the browser's own, so any Chromium or Chrome will do
(`CHROMIUM=google-chrome` on GitHub's runners). The site is served over HTTP on a loopback port the OS hands out,
as a user's `mkdocs serve` or a static host would serve it.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import Request, urlopen

import pytest
import websocket  # websocket-client

pytestmark = pytest.mark.browser  # headless Chromium (make browser)

REPO = Path(__file__).resolve().parents[1]
MKDOCS = REPO / ".venv" / "bin" / "mkdocs"
BROWSER = os.environ.get("CHROMIUM", "chromium")
# Generous limits that only catch hangs: a page of this site loads in well under a second.
START_TIMEOUT_S = 60.0
PAGE_TIMEOUT_S = 60.0


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(REPO / "mkdocs.yml", out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def copy_of_the_docs(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ in a scratch folder, to break on purpose."""
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    return tmp_path / "mkdocs.yml"


def test_every_page_is_built_from_the_nav(site: Path) -> None:
    pages = {p.relative_to(REPO / "docs").with_suffix("").as_posix() for p in (REPO / "docs").glob("*.md")}
    for page in pages:
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.exists(), f"{page}.md was not built"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda docs: (docs / "orphan.md").write_text("# Orphan\n"), "orphan.md"),
        (
            lambda docs: (docs / "ppo.md").write_text((docs / "ppo.md").read_text() + "\n[x](nowhere.md)\n"),
            "nowhere.md",
        ),
        (
            lambda docs: (docs / "ppo.md").write_text((docs / "ppo.md").read_text() + "\n[x](sac.md#no-such)\n"),
            "no-such",
        ),
    ],
    ids=["a page not in the nav", "a broken link", "a broken anchor"],
)
def test_strict_build_fails_on(tmp_path: Path, change: Any, says: str) -> None:
    config = copy_of_the_docs(tmp_path)
    change(tmp_path / "docs")
    done = build(config, tmp_path / "site")
    assert done.returncode != 0 and says in done.stdout + done.stderr


# -- the site in a browser ----------------------------------------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


@contextlib.contextmanager
def chromium(tmp_path: Path) -> Iterator[str]:
    """A headless browser on a DevTools port the OS hands out; yields its HTTP endpoint. Always stopped (by pid)."""
    binary = shutil.which(BROWSER)
    if binary is None:
        pytest.fail(f"{BROWSER} is not installed: run `make browser` (Debian's chromium)")
    proc = subprocess.Popen(
        [
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={tmp_path / 'profile'}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = None
        deadline = time.monotonic() + START_TIMEOUT_S
        assert proc.stderr is not None
        while endpoint is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            match = re.search(r"DevTools listening on ws://([\d.]+:\d+)/", line)
            endpoint = f"http://{match.group(1)}" if match else None
        assert endpoint, f"{BROWSER} did not start its DevTools endpoint (exit {proc.poll()})"
        # The browser keeps writing to stderr: drain it so it never blocks on a full pipe.
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


# A request counts as answered once its response headers are in: a worker's script reports the rest of its load to
# the worker's own target, not the page's (Material's search worker).
ANSWERED = (
    "Network.responseReceived",
    "Network.responseReceivedExtraInfo",
    "Network.loadingFinished",
    "Network.loadingFailed",
)


class Page:
    """One browser tab over the DevTools protocol: commands answered by id, events kept in order."""

    def __init__(self, endpoint: str) -> None:
        target = json.load(urlopen(Request(f"{endpoint}/json/new?about:blank", method="PUT"), timeout=30))
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=PAGE_TIMEOUT_S)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self.events):
            assert time.monotonic() < deadline, f"no {method} within {timeout_s} s"
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def settle(self, timeout_s: float) -> None:
        """Until every request the page started has finished (scripts that load more after the load event)."""
        deadline = time.monotonic() + timeout_s
        while True:
            started = {
                e["params"]["requestId"]: e["params"]["request"]["url"]
                for e in self.events
                if e.get("method") == "Network.requestWillBeSent"
            }
            answered = {e["params"]["requestId"] for e in self.events if e.get("method") in ANSWERED}
            open_requests = {url for request, url in started.items() if request not in answered}
            if not open_requests and self.evaluate("document.readyState") == "complete":
                return
            assert time.monotonic() < deadline, f"requests still open after {timeout_s} s: {open_requests}"
            self.events.append(json.loads(self.ws.recv()))  # the next event, or the read times out

    def problems(self, host: str) -> list[str]:
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                out.append(f"console.{params['type']}: {[a.get('value') for a in params['args']]}")
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                out.append(f"log: {params['entry']['text']} ({params['entry'].get('url')})")
            elif method == "Network.loadingFailed":
                out.append(f"failed to load: {params.get('errorText')} ({params['requestId']})")
            elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
                out.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
            elif method == "Network.responseReceivedExtraInfo" and params["statusCode"] >= 400:
                out.append(f"HTTP {params['statusCode']} ({params['requestId']})")
            elif method == "Network.requestWillBeSent":
                url = params["request"]["url"]
                if urlparse(url).scheme in ("http", "https") and urlparse(url).netloc != host:
                    out.append(f"a request off the host: {url}")
        return out

    def close(self) -> None:
        self.ws.close()


RENDERED = """({
    h1: document.querySelector('h1')?.firstChild.textContent.trim(),
    tableRows: [...document.querySelectorAll('article table')].map(t => t.rows.length),
    images: [...document.querySelectorAll('img')].map(i => [i.src, i.complete, i.naturalWidth]),
    nav: document.querySelectorAll('nav a.md-nav__link').length,
})"""


def visit(folder: Path, path: str, tmp_path: Path) -> tuple[dict[str, Any], list[str]]:
    """Serve `folder`, open `path` in the browser: what rendered, and every error the page met."""
    with serve(folder) as base, chromium(tmp_path) as endpoint:
        page = Page(endpoint)
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                page.send(f"{domain}.enable")
            page.send("Page.navigate", url=base + path)
            page.wait_for("Page.loadEventFired", PAGE_TIMEOUT_S)
            page.settle(PAGE_TIMEOUT_S)
            return page.evaluate(RENDERED), page.problems(urlparse(base).netloc)
        finally:
            page.close()


@pytest.mark.parametrize(
    ("path", "heading"),
    [("/", "Surreal"), ("/ppo/", "PPO"), ("/kubernetes/", "Kubernetes")],
    ids=["home", "an algorithm page (tables, curves)", "the chart's values table"],
)
def test_a_page_renders_in_chromium_with_its_tables_and_images_and_no_console_error(
    site: Path, tmp_path: Path, path: str, heading: str
) -> None:
    rendered, problems = visit(site, path, tmp_path)
    assert rendered["h1"] == heading
    assert rendered["tableRows"] and all(rows >= 2 for rows in rendered["tableRows"]), rendered["tableRows"]
    assert all(complete and width > 0 for _, complete, width in rendered["images"]), rendered["images"]
    assert rendered["nav"] >= 10, "the theme's navigation rendered"
    if path != "/kubernetes/":
        assert any("/img/" in src for src, _, _ in rendered["images"]), "the page shows its figure"
    assert not problems, problems


def test_the_browser_check_sees_script_errors_missing_files_and_requests_off_the_host(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "index.html").write_text(
        "<html><body><h1>Broken</h1><img src='missing.png'>"
        "<script>console.error('boom')</script><script>notDefined()</script>"
        "<link rel='stylesheet' href='http://192.0.2.1/font.css'></body></html>"
    )
    rendered, problems = visit(broken, "/", tmp_path)
    assert rendered["h1"] == "Broken"
    text = "\n".join(problems)
    assert "console.error: ['boom']" in text and "notDefined is not defined" in text
    assert "HTTP 404" in text and "a request off the host: http://192.0.2.1/font.css" in text


def test_make_browser_installs_debians_chromium_only_where_it_is_missing(tmp_path: Path) -> None:
    """As images-engine installs podman: apt-get (as root, else with sudo) when the browser is not on the PATH."""
    calls = tmp_path / "calls"
    for tool in ("apt-get", "sudo"):
        fake = tmp_path / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n' + ('exec "$@"\n' if tool == "sudo" else ""))
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}

    def browser(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "-s", "browser", f"CHROMIUM={name}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )

    present = browser("sh")
    assert present.returncode == 0 and "sh is installed" in present.stdout and not calls.exists()
    missing = browser("no-such-browser")
    assert missing.returncode == 0, missing.stderr
    installs = [line.removeprefix("sudo ") for line in calls.read_text().splitlines() if "apt-get" in line]
    assert installs[-1] == "apt-get install -y -qq chromium", installs
