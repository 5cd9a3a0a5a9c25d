"""The public results site in a real browser (headless Chromium driven by selenium) over the 2020 history:
the certified statewide SDEs on the page, a correction sent through the HTTP intake shown on the open page
without a reload, and screenshots at desktop and phone width kept as test artifacts."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ELECTION = "iowa-2020-dem-caucus"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "read_api"
UNIT = "947310"  # Lee FM5 (RULES §13 E06)


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        pytest.skip(f"no headless browser: {', '.join(missing)} missing (Debian: apt-get install -y chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1100"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def live_site(iowa_dir: Path, tmp_path: Path, support_module: Any) -> Iterator[dict[str, Any]]:
    """The 2020 history on the embedded backend with the whole night running: ``caucus project`` (live),
    ``caucus serve intake`` and ``caucus serve results``, each in its own process."""
    backend = support_module.Backend("embedded", ["--data-dir", str(tmp_path / "data")], support_module.caucus_env(), tmp_path)
    try:
        backend.run("import", "idp2020", "--data", str(iowa_dir))
        token = backend.json("credentials", "issue", "--official", "Pat Official")["token"]
        backend.start("project", "project", "-q")
        intake_port = support_module.free_port()
        backend.start("intake", "serve", "intake", "--port", str(intake_port))
        url = backend.serve_results()
        intake = f"http://127.0.0.1:{intake_port}"
        support_module.wait_until(lambda: _reporting(url) == 1765, 120, lambda: backend.output("project"))
        # The runner publishes the whole view once it has caught up: a page opened before that would
        # first take every tally of the night from the feed, and the correction after them.
        support_module.wait_until(lambda: _published_reporting(backend) == 1765, 120, lambda: backend.output("project"))
        support_module.wait_until(lambda: _up(intake + "/health"), 60, lambda: backend.output("intake"))
        yield {"url": url, "intake": intake, "token": token, "backend": backend}
    finally:
        backend.stop()


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _reporting(url: str) -> int | None:
    try:
        r = httpx.get(f"{url}/api/elections/{ELECTION}/state", timeout=30)
    except httpx.HTTPError:
        return None
    return int(r.json()["reporting"]["units_reporting"]) if r.status_code == 200 else None


def _published_reporting(backend: Any) -> int | None:
    """Units reporting in the state tally the results feed's latest view holds (None: none yet)."""
    done = backend.run("subscribe", "--latest", "--election", ELECTION, "--json", ok=(0, 1, 2, 3, 4))
    states = [json.loads(line) for line in done.stdout.splitlines() if '"state"' in line]
    return max((int(s["units_reporting"]) for s in states if s.get("kind") == "state"), default=None)


def _cell(driver: Any, candidate: str, column: int) -> str:
    from selenium.webdriver.common.by import By

    row = driver.find_element(By.CSS_SELECTOR, f'table.tally tr[data-candidate="{candidate}"]')
    return str(row.find_elements(By.CSS_SELECTOR, "td")[column].text.strip())


def _shots(driver: Any, name: str) -> list[Path]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = []
    for label, width in (("desktop", 1280), ("phone", 390)):
        driver.set_window_size(width, 1100)
        path = ARTIFACTS / f"{name}-{label}.png"
        inner = driver.execute_script("return window.innerWidth")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= inner, \
            f"{name} scrolls sideways at {width} px (wide tables scroll inside their own box)"
        driver.save_screenshot(str(path))
        out.append(path)
    driver.set_window_size(1280, 1100)
    return out


def _correct(live_site: dict[str, Any]) -> dict[str, int]:
    """Send, through the intake, a correction of the unit adding two Buttigieg supporters; its final alignment."""
    unit = httpx.get(f"{live_site['url']}/api/elections/{ELECTION}/units/{UNIT}", timeout=30).json()["unit"]
    first = {c: n for c, n in unit["first"].items() if n}
    final = {c: n for c, n in unit["final"].items() if n}
    first["Buttigieg"] += 2  # two supporters left off the worksheet
    final["Buttigieg"] += 2
    correction = {
        "first_alignment": first, "final_alignment": final, "attendance": unit["attendance"] + 2,
        "delegates_reported": {c: n for c, n in unit["cds"].items() if n},
        "supersedes": unit["result_event_id"], "reason": "two supporters left off the worksheet",
        "authority": "IDP Recanvass Committee", "stage": "recanvass",
    }  # fmt: skip
    key = f"browser-{uuid.uuid4().hex[:8]}"
    sent = httpx.post(f"{live_site['intake']}/units/{UNIT}/corrections", content=json.dumps(correction), timeout=30,
                      headers={"Authorization": f"Bearer {live_site['token']}", "Idempotency-Key": key,
                               "Content-Type": "application/json"})
    assert sent.status_code == 201, sent.text
    return final


def test_the_site_shows_certified_results_and_a_correction_live(browser: Any, live_site: dict[str, Any]) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url = live_site["url"]
    browser.get(f"{url}/elections/{ELECTION}")
    assert _cell(browser, "Buttigieg", 3).startswith("562.9538") and _cell(browser, "Sanders", 3).startswith("562.0214")
    reporting = browser.find_element(By.CSS_SELECTOR, '[data-field="reporting"]').text
    assert "1,765 of 1,765" in reporting and "100.00 %" in reporting
    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, "live-status").text.startswith("live"))
    shots = _shots(browser, "statewide")
    browser.execute_script("window.__sameDocument = 'yes'")
    final_before = int(_cell(browser, "Buttigieg", 1).replace(",", ""))

    final = _correct(live_site)
    began = time.monotonic()
    # The script swaps <main> for a fresh copy: an element found just before the swap goes stale.
    WebDriverWait(browser, 2.0, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: _cell(d, "Buttigieg", 1).replace(",", "") == str(final_before + 2))
    print(f"\ncorrection on the open page {time.monotonic() - began:.2f} s after the intake accepted it")
    assert browser.execute_script("return window.__sameDocument") == "yes", "the page was not reloaded"

    browser.get(f"{url}/elections/{ELECTION}/units/{UNIT}")
    corrections = browser.find_element(By.CSS_SELECTOR, "table.corrections").text
    assert "two supporters left off the worksheet" in corrections and "IDP Recanvass Committee" in corrections
    assert "recanvass" in corrections
    assert browser.find_element(By.CSS_SELECTOR, "table.tosses caption").text == "Coin tosses"
    assert browser.find_element(By.CSS_SELECTOR, "table.findings caption").text == "Audit findings"
    assert _cell(browser, "Buttigieg", 1) == str(final["Buttigieg"])
    shots += _shots(browser, "precinct")
    browser.get(f"{url}/elections/{ELECTION}/counties/Lee")
    assert "Fort Madison" in browser.find_element(By.CSS_SELECTOR, "table.units").text
    shots += _shots(browser, "county")
    print("screenshots: " + ", ".join(str(p) for p in shots))
    assert all(p.stat().st_size > 10_000 for p in shots)



def test_a_copy_of_the_page_on_its_way_when_a_tally_arrives_does_not_hide_it(browser: Any, live_site: dict[str, Any]) -> None:
    """After a tally the script fetches <main> again. A copy asked for before the next tally arrived holds
    the older numbers: swapped in, it hid the newer ones the feed had already written into the page, until
    the copy after it came. Here every answer is held back a few seconds, and a second correction's tally
    arrives while the first correction's copy is on its way."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{live_site['url']}/elections/{ELECTION}")
    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, "live-status").text == "live")
    final_before = int(_cell(browser, "Buttigieg", 1).replace(",", ""))
    browser.execute_script("""
        var real = window.fetch.bind(window);
        window.__asked = 0;
        window.fetch = function (url, options) {
          window.__asked += 1;
          var answer = real(url, options);  // the page as the server has it now, handed over later
          return new Promise(function (done) { setTimeout(function () { done(answer); }, 5000); });
        };
        document.getElementById("results").setAttribute("data-before", "yes");
    """)
    wait = WebDriverWait(browser, 30, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,))
    _correct(live_site)
    wait.until(lambda d: d.execute_script("return window.__asked") >= 1)  # the first copy is on its way
    _correct(live_site)  # two more supporters found
    wait.until(lambda d: _cell(d, "Buttigieg", 1).replace(",", "") == str(final_before + 4))  # written by the feed
    assert browser.execute_script("return window.__asked") == 1, "the first copy was already swapped in"
    wait.until(lambda d: d.find_element(By.ID, "results").get_attribute("data-before") is None)  # the first copy is in
    shown = _cell(browser, "Buttigieg", 1).replace(",", "")
    assert shown == str(final_before + 4), f"the copy asked for before the second correction hid it: {shown}"
