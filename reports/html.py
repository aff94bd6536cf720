"""The self-contained HTML pages: jinja2 with autoescape, inline CSS, no network, no CDN.

Each page carries a Content-Security-Policy that forbids every fetch; images are data URIs. The run page
runs no script at all; the sweep index runs one inline script (column sorting), allowed by its hash
alone, so an injected ``<script>`` could not run even if escaping ever failed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from runaudit.reports import page
from runaudit.reports.findings import shown

if TYPE_CHECKING:
    import jinja2

# Our own constant (and a script hash): marked safe so the policy reads in the page source as written.
BASE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
)


@functools.cache
def _environment() -> jinja2.Environment:
    import jinja2  # deferred: only the controller renders

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("runaudit.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["shown"] = shown
    return environment


@functools.cache
def _script(name: str) -> tuple[str, str]:
    """An inline script's text and the CSP source that allows exactly that text."""
    text = resources.files("runaudit.reports").joinpath("templates", name).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return text, f"'sha256-{digest}'"


def render_run(doc: Mapping[str, Any]) -> str:
    """One run's page: the teardown answer, claims, disclosures, figures, every verdict, environment."""
    return _environment().get_template("run.html").render(policy=Markup(BASE_POLICY), **page.context(doc))


def render_index(model: Mapping[str, Any]) -> str:
    """The sweep index: runs × audits, sortable by any column without a server."""
    script, source = _script("sort.js")
    policy = f"{BASE_POLICY}; script-src {source}"
    return (
        _environment()
        .get_template("index.html")
        .render(policy=Markup(policy), script=Markup(script), **model)
    )


def render_fallback(doc: Mapping[str, Any], problem: str) -> str:
    """A page without template or figures, for when :func:`render_run` failed: the answer and every verdict.

    Built with :func:`html.escape` alone, so that whatever broke the real page cannot break this one.
    """
    import html as markup

    def text(value: Any) -> str:
        return markup.escape(str(value), quote=True)

    teardown = doc.get("teardown") or {}
    rows = "".join(
        f"<tr><td>{text(item.get('audit'))}</td><td>{text(item.get('subject'))}</td>"
        f"<td>{text(item.get('verdict'))}</td><td>{text(item.get('message'))}</td></tr>"
        for item in doc.get("verdicts", ())
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{BASE_POLICY}">'
        f"<title>runaudit: {text(doc.get('run_id'))}</title></head><body>"
        f"<h1>runaudit: {text(doc.get('run_id'))}</h1><p>{text(problem)}</p>"
        f"<p>Safe to tear down? {text(str(teardown.get('answer', 'no')).upper())}: "
        f"{text(teardown.get('reason', ''))}</p>"
        f"<table><tr><th>audit</th><th>subject</th><th>verdict</th><th>message</th></tr>{rows}</table>"
        "</body></html>\n"
    )
