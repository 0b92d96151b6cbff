"""A real browser opens the smoke run's report: no console errors, every image decodes.

Runs headless Chromium (Debian's package, driven by Playwright). Skipped with a reason only where
Chromium is absent; `.ci/run` installs it, so in CI (CI=true) its absence is a failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_report_loads_in_chromium(smoke_run, tmp_path):
    if not CHROMIUM:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; .ci/run must install it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium) — browser check not run")
    playwright = pytest.importorskip("playwright.sync_api")
    report = smoke_run / "report" / "index.html"
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(report.as_uri(), wait_until="load")
        images = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])")
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        title = page.title()
        browser.close()
    assert not errors, errors
    assert "DGNO reproduction report" in title
    assert len(images) >= 6
    broken = [alt for alt, complete, width in images if not complete or width == 0]
    assert not broken, f"images that did not decode: {broken}"
    assert (tmp_path / "report.png").stat().st_size > 20_000
