"""Headless Chromium for the browser tests: the binaries, the flags, and a driver that cleans up."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
         "--disable-background-networking --disable-component-update --disable-sync "
         "--window-size=1400,1000").split()


@contextlib.contextmanager
def chromium(prefix: str, console_logs: bool = False) -> Iterator:
    """A headless Chromium driver with a profile folder of its own (removed after); skips the test
    when Chromium or chromedriver is missing (in CI that skip fails, see conftest)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium and chromedriver are not installed")
    profile_dir = tempfile.mkdtemp(prefix=prefix)
    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.binary_location = CHROMIUM
    if console_logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile_dir, ignore_errors=True)
