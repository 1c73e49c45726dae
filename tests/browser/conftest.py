"""Fixtures of the browser tests: one real stack per session (`stack`), one Chromium per session,
a fresh page per test (`page`, Dagster's first-visit dialog handled) and `shoot(name)`, which
saves a screenshot per step under the test's tmp folder.

ESP_SAVE_SCREENSHOTS=<folder> (read when the session starts; relative to the repository) also
copies every screenshot there as `<name>.png`: `ESP_SAVE_SCREENSHOTS=docs/screenshots` refreshes
the README's tour.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.stack import Stack, running_stack
from tests.browser.ui import ACTION_TIMEOUT_MS, VIEWPORT, Shooter, chromium_executable, handle_first_visit_dialogs
from tests.conftest import REPO_ROOT

SCREENSHOTS_ENV = "ESP_SAVE_SCREENSHOTS"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that end the shared stack's stream (the newcomer's walk stops it) run after the rest."""
    items.sort(key=lambda item: item.get_closest_marker("ends_stream") is not None)


@pytest.fixture(scope="session")
def stack(tmp_path_factory, bootstrap) -> Iterator[Stack]:
    """Kafka, `esp ui` and the word-count stream's run under load, shared by every browser test."""
    with running_stack(tmp_path_factory.mktemp("browser-stack"), bootstrap) as running:
        yield running


@pytest.fixture(scope="session")
def chromium():
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=ACTION_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_executable())
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, stack):
    """A new browser context per test (no state carried over) on the stack's UI."""
    context = chromium.new_context(viewport=VIEWPORT, base_url=stack.url)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    new_page = context.new_page()
    handle_first_visit_dialogs(new_page)
    yield new_page
    context.close()


@pytest.fixture(scope="session")
def screenshot_sink() -> Path | None:
    folder = os.environ.get(SCREENSHOTS_ENV)
    return (REPO_ROOT / folder) if folder else None


@pytest.fixture
def shoot(page, tmp_path, screenshot_sink) -> Shooter:
    return Shooter(page, tmp_path / "screenshots", screenshot_sink)
