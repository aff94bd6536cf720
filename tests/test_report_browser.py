"""The pages in a real browser: Debian's headless Chromium opens them from file://.

Each page must load with no console error and no request beyond its own file, show its key parts, and
leave a screenshot for people to look at ($RUNAUDIT_SCREENSHOT_DIR, else ``screenshots/`` under pytest's
base temp). Hostile strings
must stay text: no script runs, no element is injected. Skipped only where Chromium is not installed;
CI installs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import headless
import pytest
from report_records import HOSTILE, build, demo_run, hostile_records, record, science_records

from runaudit.cli import main as runaudit_main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.ids import report_stem
from runaudit.reports import html

pytestmark = pytest.mark.skipif(
    not headless.available(), reason=f"chromium is not installed at {headless.BINARY}"
)

SETTLE = "(document.readyState === 'complete')"


@pytest.fixture(scope="module")
def browser() -> Iterator[headless.Chromium]:
    with headless.Chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $RUNAUDIT_SCREENSHOT_DIR, else ``screenshots/`` under pytest's base temp."""
    chosen = os.environ.get("RUNAUDIT_SCREENSHOT_DIR")
    folder = Path(chosen) if chosen else tmp_path_factory.getbasetemp() / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def audited_demo(demo_project: Path, folder: Path, *selection: str) -> Path:
    """The demo's report page, written by ``pytest --run`` exactly as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--run", DEMO_RUN_ID,
         "--root", str(demo_project), "--report-dir", str(folder), *selection],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / f"{DEMO_RUN_ID}.html"


@pytest.fixture(scope="module")
def demo_report(demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's custody report."""
    return audited_demo(demo_project, tmp_path_factory.mktemp("demo-report"), "-m", "custody")


def clean_load(browser: headless.Chromium, page: Path) -> headless.PageLoad:
    load = browser.load(page)
    assert load.console_errors == [], load.console_errors
    assert load.requests == [], f"the page reached out: {load.requests}"
    assert browser.evaluate(SETTLE) is True
    return load


def count(browser: headless.Chromium, selector: str) -> int:
    return browser.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length")


def text(browser: headless.Chromium, selector: str) -> str:
    """The element's text with runs of whitespace made single spaces, as a reader sees it."""
    return " ".join(browser.evaluate(f"document.querySelector({json.dumps(selector)}).textContent").split())


def shoot(browser: headless.Chromium, folder: Path, name: str) -> Path:
    from PIL import Image

    shot = browser.screenshot(folder / f"{name}.png")
    with Image.open(shot) as image:
        assert image.width == browser.width and image.height > 600
    print(f"screenshot: {shot}")
    return shot


def test_the_demo_page_opens_offline_and_shows_its_parts(
    browser: headless.Chromium, demo_report: Path, screenshots: Path
) -> None:
    doc = json.loads(demo_report.with_suffix(".json").read_text())
    clean_load(browser, demo_report)
    assert text(browser, "#teardown h2") == "Safe to tear down? YES"
    assert text(browser, "#receipt").startswith(
        "Receipt: _trust/pulls/demo/PULL_VERIFIED.json · pull demo · verified "
    )
    assert text(browser, "#receipt").endswith(" · current")
    claims = browser.evaluate(
        "[...document.querySelectorAll('.claims li')].map(li => li.textContent.replace(/\\s+/g, ' ').trim())"
    )
    [headline] = [
        row for row in doc["headlines"] if (row["metric"], row["condition_id"]) == ("accuracy", "clean")
    ]
    shown = f"{headline['value']:.{headline['precision']}f}"  # read from the capsule: float bits vary by CPU
    assert claims[0] == f"accuracy [clean] {shown} (test main) — custody ok, science not audited"
    assert len(claims) == 4
    assert count(browser, "#figures figure svg") == 1  # train.csv's curves; the science figures say why not
    assert count(browser, "#figures p.not-audited") == 5
    assert count(browser, ".matrix td.complete") == 4
    assert browser.evaluate(
        "[...document.querySelectorAll('.strip img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    assert count(browser, ".strip img") == 24
    shown = browser.evaluate(
        "[...document.querySelectorAll('#verdicts tbody tr')].reduce((n, row) => n + (row.classList.contains('folded')"
        " ? Number(row.querySelector('summary').textContent.split(' ')[0]) : 1), 0)"
    )
    assert shown == len(doc["verdicts"]) and count(browser, "#verdicts tr.folded") >= 1
    assert text(browser, "#reproduce") == doc["reproduce"]
    assert count(browser, "script") == 0
    shoot(browser, screenshots, "demo")


def test_the_demo_under_every_gate_draws_the_real_evidence(
    browser: headless.Chromium, demo_project: Path, screenshots: Path, tmp_path: Path
) -> None:
    """Every audit the harness ships, on the real demo: the figures read the science audits' own evidence."""
    page = audited_demo(demo_project, tmp_path)
    clean_load(browser, page)
    notes = browser.evaluate("[...document.querySelectorAll('#figures li')].map(li => li.textContent)")
    misread = ("malformed", "no usable", "not a map", "no finite", "has no baseline", "figure not drawn")
    assert not [note for note in notes if any(word in note for word in misread)], notes
    assert count(browser, "#figures figure svg") >= 2  # the training curves and the leakage overlaps
    assert "disclosure" in text(browser, ".claims li")
    shoot(browser, screenshots, "demo-every-gate")


def test_a_page_with_every_figure_opens_offline(
    browser: headless.Chromium, demo_report: Path, project: Path, screenshots: Path, tmp_path: Path
) -> None:
    custody = json.loads(demo_report.with_suffix(".json").read_text())["verdicts"]
    run = demo_run(project)
    page = tmp_path / "rich.html"
    page.write_text(html.render_run(build(run, [*custody, *science_records()])), encoding="utf-8")
    clean_load(browser, page)
    assert count(browser, "#figures figure svg") == 5
    assert count(browser, "#disclosures h3") == 4
    assert "custody ok, 7 disclosures" in text(browser, ".claims li")
    shoot(browser, screenshots, "every-figure")


def test_hostile_strings_stay_text_end_to_end(
    browser: headless.Chromium,
    run_audits: Any,
    pytester: pytest.Pytester,
    project: Path,
    capsule_dir: Path,
    screenshots: Path,
) -> None:
    """Hostile text in run.json's run_id and in metrics.json's metric names, through the real harness."""
    declared = json.loads((capsule_dir / "run.json").read_text())
    declared["run_id"] = HOSTILE
    (capsule_dir / "run.json").write_text(json.dumps(declared))
    metrics_path = capsule_dir / "test/main/metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics["metrics"][0]["metric"] = HOSTILE
    metrics_path.write_text(json.dumps(metrics))
    stem = report_stem(capsule_dir.name)  # a capsule's run.json never names its report
    outcome = run_audits(capsule_dir, project, "-m", "custody", report_stem=stem)
    assert outcome.report is not None, outcome.result.stdout.str()
    assert {"capsule.ids", "capsule.metrics_schema"} <= outcome.verdicts("failed")
    folder = pytester.path / "reports"  # where run_audits points --report-dir
    assert sorted(path.name for path in folder.iterdir()) == [f"{stem}.html", f"{stem}.json"]
    clean_load(browser, folder / f"{stem}.html")
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    assert count(browser, "script") == 0 and count(browser, "img[src=x]") == 0
    assert browser.evaluate("document.title") == f"runaudit · {capsule_dir.name}"
    assert HOSTILE in text(browser, ".claims")
    assert HOSTILE in text(browser, "body")  # capsule.ids names the id run.json declares, as text
    shoot(browser, screenshots, "hostile")


def test_hostile_evidence_stays_text_in_figures_and_tables(
    browser: headless.Chromium, project: Path, tmp_path: Path
) -> None:
    run = demo_run(project)
    page = tmp_path / "hostile-evidence.html"
    records = [record("capsule.ids", "passed", gate_class="custody"), *hostile_records()]
    page.write_text(html.render_run(build(run, records)), encoding="utf-8")
    clean_load(browser, page)
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    assert count(browser, "script") == 0 and count(browser, "img[src=x]") == 0
    assert count(browser, "#figures figure svg") == 3  # history, seed band and leakage drew hostile labels
    assert HOSTILE in text(browser, "#disclosures")


def test_the_checks_see_a_page_that_reaches_out_or_logs_an_error(
    browser: headless.Chromium, tmp_path: Path
) -> None:
    """The negative control: the same checks fail on a page that fetches and logs, so they can fail."""
    page = tmp_path / "leaky.html"
    page.write_text(
        '<!DOCTYPE html><title>leaky</title><img src="http://127.0.0.1:9/pixel.png">'
        '<script>console.error("broken on purpose")</script>'
    )
    load = browser.load(page)
    assert load.requests == ["http://127.0.0.1:9/pixel.png"]
    assert "broken on purpose" in load.console_errors


def test_the_sweep_index_sorts_without_a_server(
    browser: headless.Chromium, demo_report: Path, screenshots: Path, tmp_path: Path
) -> None:
    base = json.loads(demo_report.with_suffix(".json").read_text())
    for run_id, broken in (("run-a", None), ("run-b", "capsule.ids"), ("run-c", None)):
        doc = json.loads(json.dumps(base))
        doc["run_id"] = run_id  # renamed: the demo's receipt covers no run of that name
        doc["teardown"] = {"answer": "not yet", "reason": f"no pull receipt binds run {run_id}"}
        for item in doc["verdicts"]:
            if item["audit"] == broken:
                item["verdict"] = "failed"
        (tmp_path / f"{run_id}.json").write_text(json.dumps(doc))
    shutil.copy(demo_report, tmp_path / "run-b.html")
    assert runaudit_main(["report-index", "--report-dir", str(tmp_path)]) == 0
    clean_load(browser, tmp_path / "index.html")
    order = "[...document.querySelectorAll('#sweep tbody tr')].map(row => row.cells[0].textContent.trim())"
    assert browser.evaluate(order) == ["run-a", "run-b", "run-c"]
    ids_column = browser.evaluate(
        "[...document.querySelectorAll('#sweep thead button')].find(b => b.textContent === 'ids').dataset.col"
    )
    browser.evaluate(f"document.querySelector('#sweep thead button[data-col=\"{ids_column}\"]').click()")
    assert browser.evaluate(order)[0] == "run-b"  # worst first
    browser.evaluate("document.querySelector('#sweep thead button[data-col=\"0\"]').click()")
    assert browser.evaluate(order) == ["run-c", "run-b", "run-a"]
    assert text(browser, "#sweep tbody tr a") == "run-b"  # only run-b has a page beside its report
    shoot(browser, screenshots, "index")
