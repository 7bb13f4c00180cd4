"""Issue 34 in a real browser: headless Chromium (Debian's, driven by Selenium) on the page of ``replay ui`` while a
writer writes. The page shows the new frontier, marks the stalled part and the part holding the stream back, and a
click on a time shows its records with the schema. Screenshots in light and dark schemes are saved (the folder
``$EVENTLOG_UI_SCREENSHOTS``, else the test's tmp folder) and checked for what a person needs to read them: text
that contrasts with its background, no label over another, numbers with units; every resource the page loaded
came from the server itself."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from .conftest import wait_for

pytest.importorskip("prometheus_client", reason="prometheus_client (the ui extra) makes /metrics")

_OVERLAPS = """
const boxes = [];
for (const svg of document.querySelectorAll('.chart svg')) {
  const texts = [...svg.querySelectorAll('text')].map((t) => t.getBoundingClientRect());
  for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
    const a = texts[i], b = texts[j];
    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) boxes.push('chart labels');
  }
}
for (const f of document.querySelectorAll('.fact .label, .fact .value, .chart .title span')) {
  if (f.scrollWidth > f.clientWidth + 1) boxes.push('cut: ' + f.textContent);
}
const title = [...document.querySelectorAll('.chart .title')];
for (const t of title) {
  const [a, b] = t.querySelectorAll('span');
  const ra = a.getBoundingClientRect(), rb = b.getBoundingClientRect();
  if (ra.right > rb.left + 1 && ra.top < rb.bottom && rb.top < ra.bottom) boxes.push('title over value: ' + t.textContent);
}
return boxes;
"""

_CONTRAST = """
function rgb(c) { const m = c.match(/[\\d.]+/g).map(Number); return m.slice(0, 3); }
function lum(c) { const [r, g, b] = rgb(c).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b; }
function bg(e) { while (e) { const c = getComputedStyle(e).backgroundColor; if (c && !c.endsWith(', 0)') && c !== 'transparent') return c; e = e.parentElement; } return 'rgb(255,255,255)'; }
const worst = [];
for (const e of document.querySelectorAll('td, th, h2, h3, .fact .label, .fact .value, .chart .title span, .badge, .chip, p, .conn')) {
  if (!e.offsetParent || !e.textContent.trim()) continue;
  const a = lum(getComputedStyle(e).color), b = lum(bg(e));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < 4.5) worst.push([e.className || e.tagName, e.textContent.slice(0, 30), ratio.toFixed(2)]);
}
return worst;
"""


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("EVENTLOG_UI_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _text(driver, css: str) -> str:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


def _check_readable(driver, scheme: str) -> None:
    assert driver.execute_script(_OVERLAPS) == [], scheme
    assert driver.execute_script(_CONTRAST) == [], scheme


def test_the_page_follows_a_writer_marks_stalls_and_shows_a_times_records(chromium, tmp_path, serve, writers,
                                                                        shots):
    from selenium.webdriver.common.by import By

    uri = str(tmp_path / "log")
    w = writers(uri, "clicks", 3)
    for t in range(3):
        for p in range(3):
            w.write(p, t)
    other = writers(uri, "done", 1)
    other.write(0, 0)
    other.finish(0)
    server = serve(uri, stall_after=3.0, history=120.0)
    driver = chromium
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme",
                                                                        "value": "light"}]})
    driver.get(server.url)
    part = '#stream-clicks tr[data-part="{}"]'
    wait_for("the page shows part 0 at frontier 3",
             lambda: _text(driver, part.format(0) + " td:nth-child(2)") == "3")
    assert _text(driver, "#conn") == "live"
    assert "finished" in _text(driver, "#stream-done .badges")

    # the writer goes on: parts 0 and 1 move, part 2 stops writing
    for t in range(3, 8):
        w.write(0, t, n=5)
        w.write(1, t, n=5)
    wait_for("the page shows part 0 at frontier 8", lambda: _text(driver, part.format(0) + " td:nth-child(2)") == "8")
    assert _text(driver, '#stream-clicks [data-fact="frontier"] .value') == "3"  # part 2 holds it at 3
    wait_for("part 2 marked holding back or stalled",
             lambda: _text(driver, part.format(2) + " td:nth-child(3)") in ("holding back", "stalled"))
    assert "held back by part 2" in _text(driver, "#stream-clicks .badges")
    for t in range(8, 10):  # parts 0 and 1 keep writing while part 2 stays silent
        w.write(0, t, n=5)
        w.write(1, t, n=5)
    wait_for("part 2 marked stalled", lambda: _text(driver, part.format(2) + " td:nth-child(3)") == "stalled")
    assert "1 stalled part" in _text(driver, "#stream-clicks .badges")
    assert "stalled" in driver.find_element(By.CSS_SELECTOR, part.format(2)).get_attribute("class")
    # numbers carry their units
    lag = _text(driver, part.format(2) + " td:nth-child(4)")
    assert re.fullmatch(r"[\d.]+ (ms|s)|\d+ min \d+ s", lag), lag
    assert re.search(r"rec/s$", _text(driver, part.format(0) + " td:nth-child(5)"))
    assert re.search(r"B/s$", _text(driver, part.format(0) + " td:nth-child(6)"))
    assert re.search(r" ago$", _text(driver, part.format(2) + " td:nth-child(10)"))
    wait_for("a chart with a line", lambda: driver.find_elements(By.CSS_SELECTOR, "#stream-clicks .chart path.s1"))
    _check_readable(driver, "light")
    driver.save_screenshot(str(shots / "ui-light.png"))

    # the system's dark scheme
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme",
                                                                        "value": "dark"}]})
    wait_for("dark colours", lambda: driver.execute_script(
        "return getComputedStyle(document.body).backgroundColor") != "rgb(247, 247, 245)")
    _check_readable(driver, "dark")
    driver.save_screenshot(str(shots / "ui-dark.png"))

    # a click on a time shows its records, with the schema
    chip = driver.find_element(By.CSS_SELECTOR, '#stream-clicks .times .chip[data-time="5"]')
    chip.click()
    wait_for("the records of time 5", lambda: "10 records at time 5" in _text(driver, "#records-body .summary"))
    assert "schema: n: int64?, word: string?" in _text(driver, "#records .schema")  # ?: nullable, as gen writes it
    rows = driver.find_elements(By.CSS_SELECTOR, "#records table.rows tbody tr")
    assert len(rows) == 10
    cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells[0] == "0" and cells[2:] == ["5000", "t5p0"]
    assert "time 5 is not complete: part 2 may still write at it" in _text(driver, "#records-body .summary")
    _check_readable(driver, "dark, records")
    driver.save_screenshot(str(shots / "ui-dark-records.png"))
    driver.find_element(By.ID, "records-close").click()
    wait_for("the panel closed", lambda: not driver.find_element(By.ID, "records").is_displayed())

    # the frontier in the part table is a time too: part 2's frontier, 3, has records of parts 0 and 1
    driver.find_element(By.CSS_SELECTOR, part.format(2) + ' button.time[data-time="3"]').click()
    wait_for("the records of time 3", lambda: "records at time 3" in _text(driver, "#records-body .summary"))

    # a stream created now appears without a reload
    late = writers(uri, "late", 1)
    late.write(0, 0)
    wait_for("the new stream", lambda: _text(driver, "#stream-late h2") == "late")

    # the theme button: light on a dark system
    driver.find_element(By.ID, "records-close").click()
    driver.find_element(By.ID, "theme").click()
    wait_for("theme: light", lambda: _text(driver, "#theme") == "theme: light")
    _check_readable(driver, "light by choice")
    driver.save_screenshot(str(shots / "ui-light-chosen.png"))

    origin = server.url.rstrip("/")
    loaded = driver.execute_script("return performance.getEntriesByType('resource').map((r) => r.name)")
    assert loaded and all(u.startswith(origin + "/") for u in loaded), loaded
    for name in ("ui-light.png", "ui-dark.png", "ui-dark-records.png", "ui-light-chosen.png"):
        assert (shots / name).stat().st_size > 10_000


def test_the_jobs_of_the_runtime_on_the_page(chromium, tmp_path, serve, shots):
    """A finished job of the runtime: operators with instances, channels, checkpoints and restarts."""
    from runtime import Fault, FaultPlan
    from tests.support.pipelines import wordcount_job

    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    job = wordcount_job("wc", out, items=120)
    result = job.run(None, channels=str(tmp_path / "ch"), checkpoints=ck, checkpoint_interval=0.1,
                     faults=FaultPlan([Fault(0, "count", 1, "record", 15)]))
    assert result.status == "finished" and result.restarts == 1
    server = serve(out, jobs=(ck,))
    chromium.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme",
                                                                         "value": "light"}]})
    chromium.get(server.url)
    wait_for("the job", lambda: _text(chromium, '#jobs article[data-job="wc"] h2') == "wc")
    text, rows = chromium.execute_script(
        "const c = document.querySelector('#jobs article[data-job=\"wc\"]'); c.scrollIntoView();"
        "return [c.innerText, c.querySelectorAll('table tbody tr').length];")
    assert "finished" in text and f"last checkpoint: #{result.last_checkpoint}" in text
    assert "count.1" in text and "source.0 → upper.0" in text
    assert "generation 1 failed" in text and "InjectedFailure" in text  # the restart and its reason
    plan = job.plan()
    assert rows == sum(n.parallelism for n in plan.nodes.values()) + len(plan.channels)
    _check_readable(chromium, "jobs")
    chromium.save_screenshot(str(shots / "ui-jobs.png"))
