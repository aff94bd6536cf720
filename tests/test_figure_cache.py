"""The page's figure cache: a redraw only when the figure's inputs or drawing code changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from runaudit.reports import figure_cache

calls: list[tuple[str, ...]] = []


def draw(*labels: str) -> str:
    calls.append(labels)
    return f'<svg class="{"-".join(labels)}"></svg>'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "figures"
    monkeypatch.setenv("RUNAUDIT_FIGURE_CACHE", str(folder))
    calls.clear()
    return folder


def test_the_same_inputs_are_drawn_once_and_new_inputs_afresh(cache: Path) -> None:
    first = figure_cache.drawn(draw, "loss")
    assert figure_cache.drawn(draw, "loss") == first == '<svg class="loss"></svg>'
    assert figure_cache.drawn(draw, "loss", "lr") == '<svg class="loss-lr"></svg>'
    assert calls == [("loss",), ("loss", "lr")]
    assert len(list(cache.glob("*.svg"))) == 2


def test_a_damaged_entry_is_redrawn_and_a_symlink_never_followed(cache: Path, tmp_path: Path) -> None:
    path = cache / f"{figure_cache.key_of(draw, ('loss',))}.svg"
    cache.mkdir()
    path.write_text("<script>alert(1)</script>")
    assert figure_cache.drawn(draw, "loss") == '<svg class="loss"></svg>'
    outside = tmp_path / "outside.svg"
    outside.write_text('<svg class="planted"></svg>')
    path.unlink()
    path.symlink_to(outside)
    assert figure_cache.drawn(draw, "loss") == '<svg class="loss"></svg>'
    assert outside.read_text() == '<svg class="planted"></svg>' and not path.is_symlink()
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
    assert figure_cache.drawn(draw, "loss") == '<svg class="loss"></svg>'
    assert figure_cache.drawn(draw, "loss") == '<svg class="loss"></svg>' and len(calls) == 2


def test_the_curves_are_predrawn_in_a_child_once(cache: Path, demo_project: Path) -> None:
    from runaudit.examples.digits.build import DEMO_RUN_ID
    from runaudit.reports import figures, plots
    from runaudit.reports.history import read_history

    run_path = demo_project / "export" / DEMO_RUN_ID
    history = read_history(run_path)
    assert not figure_cache.is_cached(plots.training_curves, (history, []))
    child = figures.predraw_curves(run_path)
    assert child is not None and child.wait(timeout=120) == 0
    assert figure_cache.is_cached(plots.training_curves, (history, []))
    assert figures.predraw_curves(run_path) is None  # nothing left to draw
    assert figures.history_figure({"verdicts": []}, run_path).svg.startswith("<svg ")
    assert len(list(cache.glob("*.svg"))) == 1  # the page found the child's figure: it drew no other
