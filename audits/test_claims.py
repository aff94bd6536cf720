"""Claims gate: every number a paper, README or slide states equals the artifact it came from (docs/claims.md).

``pytest --run=<group|id> --runaudit-claims README.md paper.tex results.csv`` reads each document and checks
each number it states about a metric against the sealed capsules under the project root: every run's
metrics.json values and every comparison group's arm means (mean ± standard error over seeds, as
``runaudit table`` generates them). A number passes when it equals its artifact at its printed precision,
claims no more decimals than the artifact supports, and every capsule behind it holds a current receipt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runaudit.delivery import Scope
from runaudit.documents import Statement
from runaudit.fixtures.claims import Unchecked
from runaudit.fixtures.verdicts import AuditRecorder

pytestmark = pytest.mark.claims


def test_number(
    claimed_number: Statement | Unchecked, claim_scope: Scope, claim_folder: Path, audit: AuditRecorder
) -> None:
    """A number a document states equals its artifact at the precision printed, claims no more digits than
    the seeds or the declared precision support, and rests on capsules that held custody."""
    if isinstance(claimed_number, Unchecked):
        audit.fail(f"{claimed_number.document}: {claimed_number.reason}")
    judgement = claim_scope.judge(claimed_number, claim_folder)
    audit.evidence(**judgement.evidence)
    if judgement.verdict == "not_run":
        audit.not_run(judgement.message)
    if judgement.verdict == "failed":
        audit.fail(judgement.message)
    audit.note(judgement.message)
