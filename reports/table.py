"""``runaudit table --root ROOT --group GROUP``: a comparison group's results table, generated from its capsules.

Markdown, LaTeX (booktabs) or CSV, from :mod:`runaudit.tables`; the provenance of every cell (run ids and
the SHA-256 of each capsule's run.json) goes to ``<out>.provenance.json`` beside the table. A number in a
paper or a README is pasted from here, never typed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runaudit.atomic import write_bytes_atomic
from runaudit.reader import Unavailable
from runaudit.tables import FORMATS, group_table, render
from runaudit.usage import Refusal, existing_dir


def _main(args: argparse.Namespace) -> int:
    try:
        table = group_table(args.root, args.group, args.test)
    except (ValueError, Unavailable) as exc:
        raise Refusal(f"table {args.group}: {exc}") from None
    if args.out is None:
        sys.stdout.write(render(table, args.format, "(none: pass --out to keep it)"))
        return 0
    sidecar = args.out.with_name(args.out.name + ".provenance.json")
    write_bytes_atomic(args.out, render(table, args.format, sidecar.name).encode("utf-8"))
    write_bytes_atomic(sidecar, (json.dumps(table.provenance(), indent=2) + "\n").encode("utf-8"))
    print(
        f"table {args.group}: {len(table.arms)} arm(s) × {len(table.columns)} column(s) -> {args.out} (+ {sidecar.name})"
    )
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser("table", help="a comparison group's results table, generated from its capsules")
    parser.add_argument("--root", type=existing_dir, default=Path.cwd(), help="project root (default: .)")
    parser.add_argument("--group", required=True, help="the comparison group (run.json comparison.group)")
    parser.add_argument(
        "--test", default="main", help="the test whose metrics.json is tabled (default: main)"
    )
    parser.add_argument("--format", choices=FORMATS, default="markdown")
    parser.add_argument(
        "--out", type=Path, help="write here (and the provenance beside it) instead of stdout"
    )
    parser.set_defaults(handler=_main)
