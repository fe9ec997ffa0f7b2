"""Take the guides' screenshots from a freshly seeded demo: `make screenshots`.

What it does, in order: seeds a throwaway demo exactly as `make demo` does (SQLite, the
portal's Git repository and everything else under a temporary PORTAL_VAR_DIR, so the
checkout's var/ is never touched), serves it with `manage.py serve --demo-jobs` on free ports,
waits until it answers and the fleet has been read once, then signs in through the login
form as each persona in Debian's Chromium and saves the page the sign-in lands on, and the
catalog's GPU-share form with a request filled in and its live preview, as 1440x900 PNGs in
docs/img/. Any JavaScript error, console error, failed response or Content-Security-Policy
violation, and any sign-in that does not land, stops it with a message and exit status 1.

Why a script run with ``python -m docs.screenshots`` and not a management command: it works
the portal from outside, as `make demo` and a person do (the demo's own commands in child
processes, then a browser), so its own process needs no Django settings; and Playwright is a
test extra (`make screenshots` installs it as `make test` does), which a management command
would drag into the app. It shares the browser's launch and its CSP watch with the browser
tests (tests/support/chromium.py), so a picture passes the same checks as a test.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import BrowserContext, Page, Response, ViewportSize, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.support.chromium import CHROMIUM, CHROMIUM_ARGS, watch_for_csp_violations
from tests.support.waiting import free_port

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "docs" / "img"
# portal/management/commands/seed_demo.py's DEMO_PASSWORD (tests/portal/test_screenshots.py
# keeps the two equal); not imported, because that module needs Django set up.
DEMO_PASSWORD = "demo-password-1"
LOGIN_PATH = "/accounts/login/"
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}
# Chromium's PNGs of these pages weigh 50-150 KB; past this the guides get heavy to clone.
MAX_IMAGE_BYTES = 400_000
# Seconds: generous for a busy two-core machine, short enough that a hang fails in minutes.
START_TIMEOUT = 120
PAGE_TIMEOUT_MS = 30_000
# The parts of the inventory a landing page shows (fleet.models.SyncState.Source): the picture
# waits until each has been read from the simulated cluster once.
FLEET_SOURCES = ("nodes", "pods", "kueue", "flux")


class ScreenshotError(Exception):
    """Something the pictures would hide or get wrong; the message says what."""


@dataclass(frozen=True)
class Persona:
    """Someone of the seeded demo whose landing page the guides show.

    ``role`` is their role as seed_demo gives it: a platform role (``platform-admin``,
    ``finance``) without ``tenant``, else their role in ``tenant``."""

    username: str
    image: str
    role: str
    tenant: str = ""


PERSONAS = (
    Persona("platform", "landing-platform.png", "platform-admin"),
    Persona("finance", "landing-finance.png", "finance"),
    Persona("alice", "landing-tenant-admin.png", "admin", "vision"),
    Persona("bob", "landing-tenant-member.png", "member", "vision"),
    Persona("frank", "landing-tenant-viewer.png", "viewer", "llm-platform"),
    Persona("erin", "landing-dedicated-tenant.png", "admin", "bank-risk"),
)


@dataclass(frozen=True)
class CatalogForm:
    """A catalog request to fill in, by field label, and picture with its preview, once the
    preview shows ``shows`` (a CSS selector: what the picture is for)."""

    username: str
    tenant: str
    kind: str
    image: str
    text: tuple[tuple[str, str], ...]
    choices: tuple[tuple[str, str], ...]
    shows: str


CATALOG_FORM = CatalogForm(
    username="alice",
    tenant="vision",
    kind="gpu-share",
    image="catalog-form-price.png",
    text=(
        ("Name", "finetune-spring"),
        ("Count", "2"),
        ("Reason", "Fine-tuning the captioning model for the spring release"),
    ),
    choices=(("Kind", "h200"),),
    # The request's cost at current prices (templates/billing/_estimate.html).
    shows="#preview [data-testid=cost-estimate]",
)


def image_names() -> list[str]:
    """Every file this script writes into docs/img/, in the order it writes them."""
    return [p.image for p in PERSONAS] + [CATALOG_FORM.image]


# --- the demo -------------------------------------------------------------------------------


def demo_env(var_dir: Path, simulator_port: int, base: dict[str, str]) -> dict[str, str]:
    """The environment of a demo that keeps everything under ``var_dir``.

    Whatever in ``base`` would send the demo elsewhere (a PostgreSQL database, a Redis broker or
    cache, another repository or schema folder, a real cluster, keys of a deployment) is
    dropped: the pictures come from the demo as a clean clone gets it. The simulator gets a
    free port too, so a running `make demo` (8001) does not collide."""
    env = {
        k: v
        for k, v in base.items()
        if k not in ("CELERY_BROKER_URL", "CACHE_URL", "STATIC_ROOT")
        and not k.startswith(("GITOPS_", "FLEET_", "PORTAL_"))
    }
    env.update(
        DEBUG="true",
        PORTAL_VAR_DIR=str(var_dir),
        DATABASE_URL=f"sqlite:///{var_dir / 'portal.sqlite3'}",
        FLEET_SIMULATOR_ADDR=f"127.0.0.1:{simulator_port}",
    )
    return env


# What `make demo` runs before serving (the Makefile's demo target), in its order.
SEED_COMMANDS = (
    ("migrate", "--noinput", "-v0"),
    ("createcachetable",),
    ("fetch_schemas", "--offline-ok"),
    ("seed_demo",),
)


def manage(*args: str) -> list[str]:
    return [sys.executable, "manage.py", *args]


def seed(env: dict[str, str], say: Callable[[str], None]) -> None:
    for command in SEED_COMMANDS:
        say(f"manage.py {' '.join(command)}")
        done = subprocess.run(
            manage(*command), cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise ScreenshotError(
                f"manage.py {' '.join(command)} failed ({done.returncode}):\n"
                f"{done.stdout}{done.stderr}"
            )


def wait_until(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[Any], log: Path
) -> None:
    """Poll ``condition`` until it holds; fail as soon as ``process`` exits, or on timeout."""
    deadline = time.monotonic() + START_TIMEOUT
    while not condition():
        if process.poll() is not None:
            raise ScreenshotError(
                f"the demo server exited ({process.returncode}) before {what}:\n{tail(log)}"
            )
        if time.monotonic() > deadline:
            raise ScreenshotError(f"gave up after {START_TIMEOUT} s waiting for {what}")
        time.sleep(0.2)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (our own http URL)
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


def fleet_read(database: Path) -> bool:
    """Whether the demo's first fleet sync has read each of FLEET_SOURCES from the simulator.

    Read from the demo's own SQLite file: no page or API says it without signing in."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as db:
            rows = db.execute(
                "SELECT source FROM fleet_syncstate WHERE last_success IS NOT NULL"
            ).fetchall()
    except sqlite3.Error:
        return False
    return set(FLEET_SOURCES) <= {source for (source,) in rows}


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def demo_server(env: dict[str, str], var_dir: Path, say: Callable[[str], None]) -> Iterator[str]:
    """The seeded demo served as `make demo` serves it; yields its base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = var_dir / "serve.log"
    with log.open("w") as output:
        say(f"manage.py serve --demo-jobs on {url}")
        server = subprocess.Popen(
            manage("serve", "--demo-jobs", f"127.0.0.1:{port}"),
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: answers(f"{url}/healthz"), "it answered HTTP", server, log)
            database = var_dir / "portal.sqlite3"
            wait_until(lambda: fleet_read(database), "the fleet was read", server, log)
            yield url
        finally:
            stop(server)


def stop(server: subprocess.Popen[Any]) -> None:
    """Stop the server as Ctrl-C does (its simulator and threads shut down), else kill it."""
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# --- the browser ----------------------------------------------------------------------------


# htmx logs these two as errors whenever hx-sync="replace" drops a request for a newer one (the
# catalog form does, by design); a request that really fails logs its own htmx:sendError or
# htmx:responseError as well, and a response of 400 or above is caught on its own.
HTMX_ABORT_LOGS = ("htmx:sendAbort", "htmx:afterRequest")


class PageWatch:
    """Everything going wrong in a browser context that a picture would not show: uncaught
    JavaScript errors, console errors (htmx reports a failed fragment there), responses of
    400 and above, and Content-Security-Policy violations."""

    def __init__(self, context: BrowserContext) -> None:
        self.problems: list[str] = []
        self.violations = watch_for_csp_violations(context)
        context.on("page", self._watch)

    def _watch(self, page: Page) -> None:
        page.on("pageerror", lambda error: self.problems.append(f"JavaScript error: {error}"))
        page.on(
            "console",
            lambda message: (
                self.problems.append(f"console error: {message.text}")
                if message.type == "error" and message.text.split(",")[0] not in HTMX_ABORT_LOGS
                else None
            ),
        )
        page.on(
            "response",
            lambda response: (
                self.problems.append(f"HTTP {response.status} for {response.url}")
                if response.status >= 400
                else None
            ),
        )

    def check(self, where: str) -> None:
        """Fail with everything seen so far, saying ``where`` it was seen."""
        problems = self.problems + [f"CSP violation: {v}" for v in self.violations]
        if problems:
            raise ScreenshotError(f"{where}:\n  " + "\n  ".join(problems))


def sign_in(page: Page, base_url: str, username: str, password: str) -> str:
    """Sign in through the login form as a person does; return the path it lands on."""
    page.goto(f"{base_url}{LOGIN_PATH}")
    page.locator("input[name=login]").fill(username)
    page.locator("input[name=password]").fill(password)
    page.locator(f"form[action='{LOGIN_PATH}'] button[type=submit]").click()
    try:
        page.wait_for_url(lambda url: urlsplit(url).path != LOGIN_PATH)
    except PlaywrightError:
        said = " ".join(page.locator("main").inner_text().split())[:300]
        raise ScreenshotError(
            f"signing in as {username} did not land: still on {page.url} ({said})"
        ) from None
    # A page that only the signed-in see has a sign-out form (templates/base.html).
    if not page.locator("form[action='/accounts/logout/']").count():
        raise ScreenshotError(f"signing in as {username} landed on {page.url}, signed out")
    return urlsplit(page.url).path


def settle(page: Page) -> None:
    """Wait until the page is as a person would see it: its fragments and charts loaded
    (no request in flight for a while, none running in htmx) and its fonts in."""
    page.wait_for_load_state("networkidle")
    page.wait_for_function(
        "() => !document.querySelector('.htmx-request') && document.fonts.status === 'loaded'"
    )


def picture(page: Page, watch: PageWatch, path: Path, where: str) -> None:
    settle(page)
    watch.check(where)
    page.screenshot(path=str(path), animations="disabled", caret="hide", scale="css")


def landing(context: BrowserContext, base_url: str, persona: Persona, out: Path) -> str:
    watch = PageWatch(context)
    page = context.new_page()
    path = sign_in(page, base_url, persona.username, DEMO_PASSWORD)
    picture(page, watch, out / persona.image, f"the landing page of {persona.username} ({path})")
    return path


def catalog_form(context: BrowserContext, base_url: str, form: CatalogForm, out: Path) -> None:
    watch = PageWatch(context)
    page = context.new_page()
    sign_in(page, base_url, form.username, DEMO_PASSWORD)
    page.goto(f"{base_url}/t/{form.tenant}/catalog/{form.kind}/new/")
    for label, value in form.choices:
        page.get_by_label(label, exact=True).select_option(value)

    inputs = {page.get_by_label(label, exact=True): value for label, value in form.text}
    fields = {str(field.get_attribute("name")): value for field, value in inputs.items()}

    # The preview follows the form (hx-post 400 ms after a key, or on leaving a field), so
    # filling sends several: wait for one that carries every value, not for the first.
    def complete(response: Response) -> bool:
        sent = parse_qs(response.request.post_data or "")
        return response.url.endswith(f"/{form.kind}/preview/") and all(
            [value] == sent.get(field) for field, value in fields.items()
        )

    with page.expect_response(complete) as answer:
        for field, value in inputs.items():
            field.fill(value)
    if not answer.value.ok:
        raise ScreenshotError(f"the catalog preview answered {answer.value.status}")
    # Filling scrolled down to the last field and left it focused: the picture shows the top,
    # where the form starts beside its preview, without a focus ring.
    page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
    settle(page)
    errors = page.locator("#preview .form-errors")
    if errors.count():
        raise ScreenshotError(f"the catalog form refused the request: {errors.inner_text()}")
    if not page.locator(form.shows).count():
        raise ScreenshotError(f"the catalog preview shows no {form.shows}")
    picture(page, watch, out / form.image, f"the {form.kind} form of {form.tenant}")


def take_pictures(base_url: str, out: Path, say: Callable[[str], None]) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:

            def context() -> BrowserContext:
                made = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
                made.set_default_timeout(PAGE_TIMEOUT_MS)
                return made

            for persona in PERSONAS:
                fresh = context()
                try:
                    path = landing(fresh, base_url, persona, out)
                finally:
                    fresh.close()
                say(f"{persona.image}: {persona.username} lands on {path}")
            fresh = context()
            try:
                catalog_form(fresh, base_url, CATALOG_FORM, out)
            finally:
                fresh.close()
            say(f"{CATALOG_FORM.image}: the {CATALOG_FORM.kind} form with its preview")
        finally:
            browser.close()


def heavy_images(out: Path, names: list[str]) -> list[str]:
    """The images of ``names`` in ``out`` over MAX_IMAGE_BYTES, with their sizes."""
    sizes = {name: (out / name).stat().st_size for name in names}
    return [f"{name} ({size // 1000} KB)" for name, size in sizes.items() if size > MAX_IMAGE_BYTES]


def run(out: Path, say: Callable[[str], None]) -> None:
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        raise ScreenshotError(f"{CHROMIUM} is not installed (`make system-deps`)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="portal-screenshots-") as tmp:
        var_dir = Path(tmp)
        env = demo_env(var_dir, free_port(), dict(os.environ))
        seed(env, say)
        with demo_server(env, var_dir, say) as base_url:
            take_pictures(base_url, out, say)
    heavy = heavy_images(out, image_names())
    if heavy:
        say(f"warning: over {MAX_IMAGE_BYTES // 1000} KB: {', '.join(heavy)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Take the guides' screenshots from a freshly seeded demo."
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="where to write the PNGs")
    options = parser.parse_args(argv)

    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - started:5.0f} s] {line}", flush=True)

    try:
        run(options.out, say)
    except (ScreenshotError, PlaywrightError) as error:
        print(f"screenshots failed: {error}", file=sys.stderr)
        return 1
    say(f"wrote {len(image_names())} images to {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
