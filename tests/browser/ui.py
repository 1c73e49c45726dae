"""Driving the Dagster UI from the browser tests: Debian's Chromium under Playwright, Dagster's
first-visit dialog out of the way, a screenshot per step, and the few UI moves several tests make."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

CHROMIUM_CANDIDATES = ("chromium", "/usr/bin/chromium", "/usr/lib/chromium/chromium")
VIEWPORT = {"width": 1440, "height": 900}
# Generous: the webserver, the daemon, Spark and the broker share two loaded cores.
ACTION_TIMEOUT_MS = 60_000
SECTION_DRAWN_MS = 15_000
"""How long an open section of the asset overview may take to be drawn before it counts as collapsed."""
FIRST_VISIT_DIALOG = "Join the Dagster community"
BLANK = "about:blank"


@contextmanager
def parked(page: Page) -> Iterator[None]:
    """Leave the page on a blank one while the test waits through the API, then load it again.

    A Dagster page left open redraws its live data without pause: in a profile of the launchpad
    test Chromium's renderer took 290 s of the 1,220 s of CPU the whole stack used (2 cores), CPU
    the runs under test waited for. A wait that fails leaves the page blank: its error is the news.
    """
    back = page.url
    page.goto(BLANK)
    yield
    page.goto(back)


def chromium_executable() -> str:
    """Debian's Chromium (`make chromium` installs it): PyPI's Playwright cannot fetch its own here."""
    for candidate in CHROMIUM_CANDIDATES:
        if found := shutil.which(candidate):
            return found
    raise AssertionError("no chromium on this machine: run `make chromium` (apt-get install chromium)")


def handle_first_visit_dialogs(page: Page) -> None:
    """Dagster asks a new visitor to join its community once per instance, over whatever page
    comes first: Playwright skips it whenever it stands in the way of an action or an assertion."""
    dialog = page.get_by_role("dialog").filter(has_text=FIRST_VISIT_DIALOG)
    page.add_locator_handler(dialog, lambda d: d.get_by_role("button", name="Skip").click())


def dismiss_dialogs(page: Page) -> None:
    """Skip the first-visit dialog now if it is up (a screenshot is no action: no handler runs)."""
    dialog = page.get_by_role("dialog").filter(has_text=FIRST_VISIT_DIALOG)
    if dialog.count():
        dialog.get_by_role("button", name="Skip").click()
        dialog.wait_for(state="hidden")


@dataclass
class Shooter:
    """`shoot(name)`: a screenshot of the page as it is, into the test's own folder as
    `NN-name.png` (NN counts the test's steps) and, when the session asked for it, into `sink`
    as `name.png` (the README's tour uses those; names are unique across the suite)."""

    page: Page
    folder: Path
    sink: Path | None = None
    taken: list[Path] = field(default_factory=list)

    def __call__(self, name: str, full_page: bool = False) -> Path:
        assert re.fullmatch(r"[a-z0-9-]+", name), f"screenshot names are kebab-case: {name!r}"
        dismiss_dialogs(self.page)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{len(self.taken) + 1:02d}-{name}.png"
        # Transitions finished, not caught halfway (a dialog fading in is half transparent).
        self.page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        self.taken.append(path)
        if self.sink is not None:
            self.sink.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, self.sink / f"{name}.png")
        return path


# -- moves several tests make ---------------------------------------------------------------------

RUN_URL = re.compile(r".*/runs/(?P<run_id>[0-9a-f-]{36})")


def expand_asset_groups(page: Page, any_group: str) -> None:
    """Open every group of the lineage graph with its own settings menu ("Expand all groups", which
    says "Collapse all groups" while any group is open), then reload: the graph is fitted to the
    view only when it loads (the open groups are remembered by the browser). Clicking the groups one
    by one misses some: each click lays the graph out again and moves the others."""
    page.locator(f"div[data-tooltip='{any_group}']").first.wait_for()  # the graph is drawn
    for _attempt in range(2):  # a collapse first when some group is open
        page.get_by_role("button", name="settings", exact=True).click()
        item = page.get_by_role("menuitem", name=re.compile("(Expand|Collapse) all groups"))
        expect(item).to_be_visible()
        expanding = "Expand" in item.inner_text()
        item.click()
        if expanding:
            break
    page.reload()


def open_overview_section(page: Page, header: str, inside: Locator) -> None:
    """Open the asset overview's section titled `header` unless `inside` (something it holds) is
    already shown: Dagster draws some sections collapsed and remembers the choice per browser."""
    try:
        inside.wait_for(timeout=SECTION_DRAWN_MS)
    except PlaywrightTimeoutError:
        page.get_by_text(header, exact=True).first.click()
        inside.wait_for()


def metadata_value(page: Page, label: str) -> str:
    """The value next to `label` in the metadata table the page shows first."""
    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=label, exact=True)).first
    return row.get_by_role("cell").nth(1).inner_text().strip()


def launch_from_launchpad(page: Page, job: str, run_config_yaml: str) -> str:
    """Open the job's launchpad, replace its config with `run_config_yaml` as a paste would,
    launch, and return the new run's id (the UI moves to the run's page)."""
    page.goto(f"/locations/esp/jobs/{job}/playground")
    editor = page.locator(".CodeMirror").first
    editor.wait_for()
    page.get_by_text("No errors").wait_for()  # the config schema is loaded: the editor validates
    _replace_config(page, editor, run_config_yaml)
    page.get_by_role("button", name="Launch Run").click()
    page.wait_for_url(RUN_URL)
    match = RUN_URL.match(page.url)
    assert match is not None, page.url
    return match["run_id"]


CONFIG_ATTEMPTS = 3
CONFIG_SETTLE_MS = 2_000
EDITOR_TEXT = "() => document.querySelector('.CodeMirror').CodeMirror.getValue()"


def _replace_config(page: Page, editor: Locator, run_config_yaml: str) -> None:
    """Replace the editor's text with `run_config_yaml` and see that it stays.

    On the first visit to a job's launchpad Dagster writes the scaffolded default config into the
    editor once the config schema has loaded. When that landed after the paste, the paste was
    overwritten and a default config launched (CI: a resize run with `{op: scale_to}` and no
    channels). So, as a user would, it waits for the editor to show a config before replacing it
    (esp's jobs all have defaults to scaffold), then reads the text back after a pause and writes
    it again if it changed."""
    page.wait_for_function(f"() => ({EDITOR_TEXT})().trim().length > 0")
    for attempt in range(1, CONFIG_ATTEMPTS + 1):
        editor.click()
        page.keyboard.press("Control+A")
        page.keyboard.insert_text(run_config_yaml)  # inserted whole: no auto-indent on typed newlines
        page.get_by_text("No errors").wait_for()
        page.wait_for_timeout(CONFIG_SETTLE_MS)
        held = page.evaluate(EDITOR_TEXT)
        if held.strip() == run_config_yaml.strip():
            return
        print(f"launchpad: attempt {attempt}: the editor held another config:\n{held}")
    raise AssertionError(f"the launchpad's editor did not keep the config:\n{held}")


SWITCH_ATTEMPTS = 3
SWITCH_SETTLE_MS = 20_000


def switch_sensor(page: Page, sensor: str, running: bool) -> None:
    """Turn a sensor on or off with the `Running` switch on its page (the page stays open).

    A user whose click did not take reloads the page and clicks again; so does this, a few times.
    A CI run on a loaded machine saw a stop click disable the switch and then leave it checked
    for a minute (why was not logged); the reloaded page shows the state the instance holds."""
    if f"/sensors/{sensor}" not in page.url:
        page.goto(f"/locations/esp/sensors/{sensor}")
    switch = page.get_by_role("checkbox")  # the page's one checkbox, drawn as a switch
    for attempt in range(1, SWITCH_ATTEMPTS + 1):
        expect(switch).to_be_enabled()  # not while an earlier switch is still in flight
        if switch.is_checked() != running:
            page.locator("label", has=switch).click()
        last = attempt == SWITCH_ATTEMPTS
        try:
            expect(switch).to_be_checked(checked=running, timeout=None if last else SWITCH_SETTLE_MS)
            return
        except AssertionError:
            if last:
                raise
            page.reload()


SKIPPED_TICK = "0 runs requested"
TICKS_SEARCHED = 8
TICK_DETAILS_MS = 10_000


def open_skipped_tick_citing(page: Page, text: str) -> Locator:
    """Open, from a sensor page's tick history, the dialog of the newest skipped tick whose reason
    contains `text`, and return it. The newest rows come first, but the history refreshes while it
    is read (a new tick, or one still being evaluated, takes the top row), so a few are tried."""
    # The button of a tick history row (the sensor's "Latest tick" cell says the same, as text).
    skipped = page.get_by_role("cell").get_by_role("button", name=SKIPPED_TICK)
    expect(skipped.first).to_be_visible()
    for row in range(min(skipped.count(), TICKS_SEARCHED)):
        skipped.nth(row).click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_be_visible()
        try:  # the dialog loads the tick's details after it opens
            expect(dialog.get_by_text("Skip reason")).to_be_visible(timeout=TICK_DETAILS_MS)
            expect(dialog).to_contain_text(text, timeout=TICK_DETAILS_MS)
            return dialog
        except AssertionError:
            dialog.get_by_role("button", name="Close").click()
        expect(dialog).to_have_count(0)
    raise AssertionError(f"none of the newest {TICKS_SEARCHED} skipped ticks cites {text!r}")
