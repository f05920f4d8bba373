"""
The HTTP cache against a public test suite of HTTP caches (``http-cache-tests``, the suite
behind cache-tests.fyi), next to the major browsers' private caches.

The suite is a Node.js program from the npm registry: its server answers each test's requests
as the test says, and its client sends them and checks what came back.  A cache is tested by
putting it between the two.  Here that is a small reverse proxy (this file) whose every
request goes through an ``httpx.Client`` with ``SmoothTransport(cache=HttpCache())`` and no
retries, so what the client sees is what smoothclient's cache made of the server's answers.

The suite's client runs in its proxy mode: the tests it marks as a browser's only do not run,
and those it marks as a CDN's are left out of the comparison (a private cache is not meant to
pass them).  The browsers' results are the suite's own published ones (in the package).  Each
test is counted as the suite counts it: required tests pass or fail; optional ones pass or
"optional fail"; "check" tests only report what a cache does (neither).  A test whose
setup failed, or whose dependencies failed, counts as neither pass nor fail.

Run: python benchmarks/http_cache_conformance.py [--fails]   (needs node and npm; about 1 min
the first time, to install the suite into ~/.cache/smoothclient)
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from smoothclient import HttpCache, RetryPolicy, SmoothTransport

SUITE = "http-cache-tests"
VERSION = "0.4.5"
BROWSERS = ("chrome", "firefox", "safari")
HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "host",
}

# Prints each test's kind, flags and dependencies, from the suite's definitions.
DEFINITIONS = """
import tests from './tests/index.mjs'
const out = {}
for (const suite of tests) {
  for (const t of suite.tests) {
    out[t.id] = {
      kind: t.kind || 'required',
      cdn: !!t.cdn_only,
      browser: !!t.browser_only,
      depends: t.depends_on || []
    }
  }
}
console.log(JSON.stringify(out))
"""
PASSED = ("pass", "yes")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _install(where: Path) -> Path:
    """The suite's package directory, installed from the npm registry if not yet there."""
    package = where / "node_modules" / SUITE
    if not (package / "package.json").exists():
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(where),
                f"{SUITE}@{VERSION}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return package


def _handler(upstream: str, client: httpx.Client) -> type[http.server.BaseHTTPRequestHandler]:
    class Proxy(http.server.BaseHTTPRequestHandler):
        """Every request through the cached client to ``upstream``; its answer back as is."""

        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = [
                # the bytes that came in, without the whitespace around a value (not part of
                # it, RFC 9110 section 5.5; h11 refuses a value that ends with a space)
                (k.encode("latin-1"), v.strip().encode("latin-1"))
                for k, v in self.headers.items()
                if k.lower() not in HOP
            ]
            try:
                request = client.build_request(
                    self.command, upstream + self.path, headers=headers, content=body
                )
                response = client.send(request, stream=True)
                try:  # (as it came: coded as the server coded it, which its headers say)
                    content = b"".join(response.iter_raw())
                finally:
                    response.close()
            except Exception as exc:  # (whatever it is: the suite's client sees a 502)
                if os.environ.get("CONFORMANCE_DEBUG"):
                    import traceback

                    traceback.print_exc()
                self.send_error(502, type(exc).__name__)
                return
            self.send_response_only(response.status_code, response.reason_phrase)
            for key, value in response.headers.multi_items():
                if key.lower() not in HOP:
                    self.send_header(key, value)
            if self.command != "HEAD" and response.status_code not in (204, 304):
                self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)

        def __getattr__(self, name: str) -> Any:  # do_GET, do_POST, do_M-SEARCH: any method
            if name.startswith("do_"):
                return self._relay
            raise AttributeError(name)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Proxy


class _Proxy(http.server.ThreadingHTTPServer):
    """The proxy's server: the suite's client opens 25 tests' connections at once."""

    daemon_threads = True
    request_queue_size = 256  # (socketserver's 5 reset the rest: read ECONNRESET)


@contextlib.contextmanager
def _server(package: Path, port: int) -> Iterator[None]:
    pidfile = Path(tempfile.gettempdir()) / f"http-cache-tests-{port}.pid"
    env = dict(
        os.environ,
        npm_config_port=str(port),
        npm_config_protocol="http",
        npm_config_pidfile=str(pidfile),
    )
    proc = subprocess.Popen(
        ["node", "server/server.mjs"],
        cwd=package,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(5)
        pidfile.unlink(missing_ok=True)


def run(package: Path, test_id: str = "") -> dict[str, Any]:
    """Our results, as the suite's client reports them (test id -> result)."""
    port, proxy_port = _free_port(), _free_port()
    cache = HttpCache()
    transport = SmoothTransport(cache=cache, policy=RetryPolicy(attempts=1))
    with httpx.Client(transport=transport, timeout=15.0) as client, _server(package, port):
        proxy = _Proxy(("127.0.0.1", proxy_port), _handler(f"http://localhost:{port}", client))
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            env = dict(
                os.environ,
                npm_config_base=f"http://127.0.0.1:{proxy_port}",
                npm_package_config_id="",  # (every test: what npm run would set)
                **({"npm_config_id": test_id} if test_id else {}),
            )
            if not test_id:
                env.pop("npm_config_id", None)
            out = subprocess.run(
                ["node", "--no-warnings", "cli.mjs"],
                cwd=package,
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            ).stdout
        finally:
            proxy.shutdown()
    if test_id:  # (the suite prints one test's verdict, not JSON)
        print(out)
        return {}
    result: dict[str, Any] = json.loads(out)
    return result


def definitions(package: Path) -> dict[str, Any]:
    """Each test's kind (required, optimal, check), CDN or browser only, and dependencies."""
    out = subprocess.run(
        ["node", "--no-warnings", "--input-type=module", "-e", DEFINITIONS],
        cwd=package,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, Any] = json.loads(out)
    return found


def verdict(tests: dict[str, Any], results: dict[str, Any], test: str) -> str:
    """The suite's verdict on one test, by its own rules (a failed dependency: not judged)."""
    result = results.get(test)
    if result is None:
        return "untested"
    if any(verdict(tests, results, d) not in PASSED for d in tests[test]["depends"]):
        return "dependency_fail"
    if isinstance(result, list) and result and result[0] == "Setup":
        return "setup_fail"
    if isinstance(result, list) and result and result[0] == "AbortError":
        return "harness_fail"
    kind = tests[test]["kind"]
    if kind == "check":
        return "yes" if result is True else "no"
    if result is True:
        return "pass"
    return "optional_fail" if kind == "optimal" else "fail"


def table(tests: dict[str, Any], sets: dict[str, dict[str, Any]]) -> str:
    """Pass and fail counts per kind, on the tests every set ran (CDN-only tests left out)."""
    common = [
        t
        for t, d in tests.items()
        if not d["cdn"] and all(t in results for results in sets.values())
    ]
    lines = [
        f"{len(common)} tests every cache below ran (CDN-only tests left out)",
        "",
        "| cache | required: pass | fail | optional: pass | optional fail "
        "| not judged (setup or dependency failed) |",
        "|---|---|---|---|---|---|",
    ]
    for name, results in sets.items():
        judged = [(tests[t]["kind"], verdict(tests, results, t)) for t in common]
        req = [v for k, v in judged if k == "required"]
        opt = [v for k, v in judged if k == "optimal"]
        other = sum(v.endswith("_fail") and v != "optional_fail" for _, v in judged)
        lines.append(
            f"| {name} | {req.count('pass')} | {req.count('fail')} | {opt.count('pass')} "
            f"| {opt.count('optional_fail')} | {other} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fails", action="store_true", help="list our failed tests")
    parser.add_argument("--json", help="also write our raw results to this file")
    parser.add_argument("--id", default="", help="run this one test, and show what it did")
    args = parser.parse_args()
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("skipped: node and npm are needed (Debian: apt install nodejs npm)")
        return
    package = _install(Path.home() / ".cache" / "smoothclient" / "http-cache-tests")
    ours = run(package, args.id)
    if args.id:
        return
    if args.json:
        Path(args.json).write_text(json.dumps(ours, indent=2))
    sets = {"smoothclient": ours}
    for browser in BROWSERS:
        sets[browser] = json.loads((package / "results" / f"{browser}.json").read_text())
    tests = definitions(package)
    print(f"{SUITE} {VERSION}, smoothclient's HttpCache (memory) as a reverse proxy\n")
    print(table(tests, sets))
    if args.fails:
        print("\nours failed:")
        for test in sorted(tests):
            judged = verdict(tests, ours, test)
            if judged in ("fail", "optional_fail") and not tests[test]["cdn"]:
                print(f"  {judged:14} {test}: {ours.get(test)}")


if __name__ == "__main__":
    sys.exit(main())
