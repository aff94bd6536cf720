"""The self-contained HTML page of a report: no network, no scripts, every value escaped."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any


@functools.cache
def _environment() -> Any:
    import jinja2  # deferred: only the controller renders

    return jinja2.Environment(
        loader=jinja2.PackageLoader("runaudit.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def render(document: Mapping[str, Any]) -> str:
    return _environment().get_template("verdicts.html").render(doc=document)
