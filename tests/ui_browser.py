"""Helpers for the browser test: find Debian's chromium + chromedriver, run dagster-webserver in its
own process group, drive headless chromium with selenium (never downloading a browser or a driver),
and read what the Dagster UI rendered."""

from __future__ import annotations

import os
from contextlib import contextmanager
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

BIN = Path(sys.executable).parent
REQUIRE_ENV = "CORPUS_REQUIRE_BROWSER"  # "1": a missing browser fails the test instead of skipping it

# Debian installs /usr/bin/chromium (a wrapper script) and /usr/bin/chromedriver (package chromium-driver)
CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMEDRIVER_CANDIDATES = ("chromedriver", "/usr/lib/chromium/chromedriver")

# As root, in a closed network: no sandbox, no GPU, nothing that phones home, a fresh profile.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--window-size=2400,1500",  # the whole asset graph (20 layers and reports) fits when zoomed to fit
)


@dataclass(frozen=True)
class Browser:
    chromium: str
    chromedriver: str


def find_browser() -> tuple[Optional[Browser], str]:
    """(Browser, "") when chromium, chromedriver and selenium are all here, else (None, why not)."""
    # CORPUS_CHROMIUM / CORPUS_CHROMEDRIVER name other binaries; otherwise Debian's, found on PATH
    chromium = _executable(os.environ.get("CORPUS_CHROMIUM"), CHROMIUM_NAMES)
    driver = _executable(os.environ.get("CORPUS_CHROMEDRIVER"), CHROMEDRIVER_CANDIDATES)
    missing = []
    if not chromium:
        missing.append("chromium (apt-get install -y chromium)")
    if not driver:
        missing.append("chromedriver (apt-get install -y chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install selenium)")
    if missing:
        return None, "not installed: " + ", ".join(missing)
    return Browser(chromium, driver), ""


def _executable(override: Optional[str], candidates) -> Optional[str]:
    if override:
        return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    return next(filter(None, map(shutil.which, candidates)), None)


from processes import free_port, start_in_group, start_webserver, wait_for_webserver  # noqa: E402,F401
from processes import group_alive as _group_alive  # noqa: E402,F401
from processes import stop_group as stop_process_group  # noqa: E402,F401


def chrome(browser: Browser, user_data_dir: Path):
    """Headless chromium through selenium with the given chromedriver: Selenium Manager is neither
    asked for a driver (explicit Service path) nor allowed online (SE_OFFLINE)."""
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser.chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={user_data_dir}")
    service = Service(executable_path=browser.chromedriver, log_output=str(user_data_dir.parent / "chromedriver.log"))
    return webdriver.Chrome(options=options, service=service)


def fresh_profile_dir(base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=base))


def dismiss_community_modal(driver) -> bool:
    """Fresh profiles get a "Join the Dagster community" dialog over the page: press its Skip."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        for dialog in driver.find_elements(By.CSS_SELECTOR, "[role=dialog]"):
            if "Join the Dagster community" not in dialog.text:
                continue
            for button in dialog.find_elements(By.XPATH, ".//button[normalize-space()='Skip']"):
                button.click()
                return True
    except WebDriverException:  # the dialog went away while we looked at it
        pass
    return False


def settle_community_modal(driver, appear_timeout: float = 5) -> None:
    """The dialog opens about a second after the first page mounts: wait for it (up to
    `appear_timeout`), press Skip (which also marks it seen on the server) and wait until it is gone."""
    from selenium.webdriver.common.by import By

    def open_dialogs():
        return [d for d in driver.find_elements(By.CSS_SELECTOR, "[role=dialog]") if "Join the Dagster community" in d.text]

    deadline = time.monotonic() + appear_timeout
    while not open_dialogs() and time.monotonic() < deadline:
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while open_dialogs():
        dismiss_community_modal(driver)
        if time.monotonic() > deadline:
            raise AssertionError("the 'Join the Dagster community' dialog does not go away")
        time.sleep(0.2)


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def wait_until(driver, what: str, predicate: Callable[[], object], timeout: float = 30):
    """Poll `predicate` (dismissing the community dialog whenever it shows) until it is truthy."""
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + timeout
    last = None
    while True:
        dismiss_community_modal(driver)
        try:
            last = predicate()
        except WebDriverException as exc:  # re-rendered elements
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}\n"
                                 f"page text:\n{page_text(driver)[:3000]}")
        time.sleep(0.25)


def wait_for_text(driver, what: str, needles, timeout: float = 30) -> str:
    """The page's text once it contains every one of `needles`."""
    def found():
        text = page_text(driver)
        return text if all(n in text for n in needles) else None

    return wait_until(driver, what, found, timeout)


def expand_all_groups(driver) -> None:
    """The asset graph's "Expand all groups" keyboard shortcut (Alt+E)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    ActionChains(driver).key_down(Keys.ALT).send_keys("e").key_up(Keys.ALT).perform()


def zoom_out(driver) -> bool:
    """Press the graph's zoom-out button once (the graph only draws nodes inside the viewport);
    False when there is no such button."""
    from selenium.webdriver.common.by import By

    icons = driver.find_elements(By.CSS_SELECTOR, "[aria-label=zoom_out]")
    if not icons:
        return False
    icons[0].find_element(By.XPATH, "./ancestor::button[1]").click()
    return True


def graph_node_labels(driver) -> list[str]:
    """The text lines of every node drawn in the asset graph (an SVG of foreignObjects)."""
    from selenium.webdriver.common.by import By

    labels = []
    for node in driver.find_elements(By.XPATH, "//*[local-name()='foreignObject']"):
        labels += [line.strip() for line in node.text.splitlines() if line.strip()]
    return labels


def label_matches(name: str, label: str) -> bool:
    """The graph middle-truncates long names when zoomed out: "contamina…_summary"."""
    if "…" in label:
        head, _, tail = label.partition("…")
        return len(head) + len(tail) >= 6 and name.startswith(head) and name.endswith(tail)
    return label == name


def missing_nodes(names, labels) -> list[str]:
    return [n for n in names if not any(label_matches(n, label) for label in labels)]


ARTIFACTS_ENV = "CORPUS_TEST_ARTIFACTS"


def keep_screenshots(folder: Path, test: str) -> list[Path]:
    """Copy the test's screenshots to ``$CORPUS_TEST_ARTIFACTS/<test>/`` (default: the project's
    ``test-artifacts/``, git-ignored) and print where they are: the test output names them."""
    dest = Path(os.environ.get(ARTIFACTS_ENV) or Path(__file__).resolve().parents[1] / "test-artifacts") / test
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for shot in sorted(folder.glob("*.png")):
        kept.append(Path(shutil.copy2(shot, dest / shot.name)))
    print(f"screenshots of {test}: " + ", ".join(str(k) for k in kept))
    return kept


@contextmanager
def ui_session(browser: Browser, project: Path, folder: Path):
    """dagster-webserver over ``project``'s workspace.yaml on a free loopback port and a fresh
    headless chromium on it: yields (base URL, driver); both are stopped on the way out, and the
    webserver's whole process group is gone when it returns."""
    port = free_port()
    log = folder / "webserver.log"
    server = start_webserver(port, project, dict(os.environ), log)
    driver = None
    try:
        wait_for_webserver(server, port, log)
        driver = chrome(browser, fresh_profile_dir(folder / "chromium"))
        driver.set_page_load_timeout(60)
        yield f"http://127.0.0.1:{port}", driver
    finally:
        if driver is not None:
            driver.quit()
        stop_process_group(server)
    assert server.returncode is not None
