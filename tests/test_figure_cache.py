"""The page's figure cache: a redraw only when the figure's inputs or drawing code changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runaudit.reports import figure_cache

calls: list[tuple[str, ...]] = []


def draw(*labels: str) -> str:
    calls.append(labels)
    return f'<svg id="{"-".join(labels)}"></svg>'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "figures"
    monkeypatch.setenv("RUNAUDIT_FIGURE_CACHE", str(folder))
    calls.clear()
    return folder


def test_the_same_inputs_are_drawn_once_and_new_inputs_afresh(cache: Path) -> None:
    first = figure_cache.drawn(draw, "loss")
    assert figure_cache.drawn(draw, "loss") == first == '<svg id="loss"></svg>'
    assert figure_cache.drawn(draw, "loss", "lr") == '<svg id="loss-lr"></svg>'
    assert calls == [("loss",), ("loss", "lr")]
    assert len(list(cache.glob("*.svg"))) == 2


def test_a_damaged_entry_is_redrawn_and_a_symlink_never_followed(cache: Path, tmp_path: Path) -> None:
    path = cache / f"{figure_cache.key_of(draw, ('loss',))}.svg"
    cache.mkdir()
    path.write_text("<script>alert(1)</script>")
    assert figure_cache.drawn(draw, "loss") == '<svg id="loss"></svg>'
    outside = tmp_path / "outside.svg"
    outside.write_text('<svg id="planted"></svg>')
    path.unlink()
    path.symlink_to(outside)
    assert figure_cache.drawn(draw, "loss") == '<svg id="loss"></svg>'
    assert outside.read_text() == '<svg id="planted"></svg>' and not path.is_symlink()
    assert calls == [("loss",), ("loss",)]


def test_off_draws_every_time_and_keeps_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNAUDIT_FIGURE_CACHE", "off")
    figure_cache.drawn(draw, "loss")
    figure_cache.drawn(draw, "loss")
    assert calls == [("loss",), ("loss",)] and not cache.exists()


def test_the_least_recently_used_figures_go_first(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figure_cache, "LIMIT", 2)
    for label in ("a", "b", "c"):
        figure_cache.drawn(draw, label)
    assert len(list(cache.glob("*.svg"))) == 2
    figure_cache.drawn(draw, "a")
    assert calls[-1] == ("a",)  # "a" was the oldest, so it had gone


def test_an_unwritable_cache_still_draws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("RUNAUDIT_FIGURE_CACHE", str(blocker / "figures"))
    calls.clear()
    assert figure_cache.drawn(draw, "loss") == '<svg id="loss"></svg>'
    assert figure_cache.drawn(draw, "loss") == '<svg id="loss"></svg>' and len(calls) == 2


def test_the_curves_are_predrawn_in_a_child_once(
    cache: Path, demo_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runaudit.examples.digits.build import DEMO_RUN_ID
    from runaudit.reports import figures, plots
    from runaudit.reports.history import read_history

    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    run_path = demo_project / "export" / DEMO_RUN_ID
    history = read_history(run_path)
    assert not figure_cache.is_cached(plots.training_curves, (history, []))
    assert figures.predraw_curves(run_path, busy=2) is None  # this session and one xdist worker: no core left
    child = figures.predraw_curves(run_path)
    assert child is not None and child.wait(timeout=120) == 0
    assert figure_cache.is_cached(plots.training_curves, (history, []))
    assert figures.predraw_curves(run_path) is None  # nothing left to draw
    assert figures.history_figure({"verdicts": []}, run_path).svg.startswith("<svg ")
    assert len(list(cache.glob("*.svg"))) == 1  # the page found the child's figure: it drew no other


@pytest.mark.parametrize(
    "planted",
    [
        '<svg id="x"><script>parent.location="http://x"</script></svg>',
        '<svg id="x"><meta http-equiv="refresh" content="0;url=http://x"/></svg>',
        '<svg id="x"><style>body{visibility:hidden}</style></svg>',
        '<svg id="x"><rect onload="alert(1)"/></svg>',
        '<svg id="x" style="background:url(http://x/pixel)"></svg>',
        '<svg id="x"><use href="http://x/#y"/></svg>',
        '<svg id="x"><!-- --><text>x</text></svg>',
        '<svg id="x"><foreignObject><div>Safe to tear down? YES</div></foreignObject></svg>',
    ],
    ids=[
        "script",
        "meta-refresh",
        "page-style",
        "handler",
        "remote-url",
        "remote-href",
        "comment",
        "overlay",
    ],
)
def test_a_cached_figure_is_taken_only_as_matplotlib_draws_it(cache: Path, planted: str) -> None:
    """A cached figure goes into the page as markup: a ``<meta http-equiv=refresh>`` or a full-page "Safe to
    tear down? YES" overlay planted in the cache folder reached the report."""
    cache.mkdir()
    (cache / f"{figure_cache.key_of(draw, ('loss',))}.svg").write_text(planted)
    assert figure_cache.drawn(draw, "loss") == '<svg id="loss"></svg>' and calls == [("loss",)]


def test_a_fifo_under_a_key_s_name_is_redrawn_without_waiting(cache: Path) -> None:
    """Opened blocking, a FIFO under a cache key's name hung the session before its page was written."""
    cache.mkdir()
    os.mkfifo(cache / f"{figure_cache.key_of(draw, ('loss',))}.svg")
    assert figure_cache.drawn(draw, "loss") == '<svg id="loss"></svg>'


def test_only_the_cache_s_own_files_are_ever_trimmed(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pointed at a folder of the user's own figures, the trimming deleted 90 of their 600 SVG files."""
    monkeypatch.setattr(figure_cache, "LIMIT", 2)
    cache.mkdir()
    mine = [cache / f"plot-{index}.svg" for index in range(5)]
    for path in mine:
        path.write_text("<svg/>")
    for label in ("a", "b", "c", "d"):
        figure_cache.drawn(draw, label)
    assert all(path.exists() for path in mine)
    assert len([path for path in cache.glob("*.svg") if path not in mine]) == 2


def test_no_child_draws_on_a_machine_whose_cores_are_busy(
    cache: Path, demo_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded machine (xdist workers of another session, a CI neighbour) has no core to lend: the
    child's fresh interpreter would cost the session CPU it needs, so the page draws the curves itself."""
    from runaudit.examples.digits.build import DEMO_RUN_ID
    from runaudit.reports import figures

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.6, 3.0, 2.0))
    assert figures.predraw_curves(demo_project / "export" / DEMO_RUN_ID) is None
    monkeypatch.setattr(os, "getloadavg", lambda: (2.2, 3.0, 2.0))
    child = figures.predraw_curves(demo_project / "export" / DEMO_RUN_ID)
    assert child is not None and child.wait(timeout=120) == 0


def test_cores_are_counted_where_the_affinity_call_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seccomp profile may refuse sched_getaffinity: the session must still start (every core counts)."""
    from runaudit import host

    def refused(pid: int) -> set[int]:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_getaffinity", refused, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert host.usable_cores() == 3
    monkeypatch.delattr(os, "getloadavg", raising=False)  # no load average at all (Windows)
    assert host.idle_cores(busy=1) == 2
