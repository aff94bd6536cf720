"""Receipts and independent acceptance: the custody audits, run fresh, turned into signed-off records.

``runaudit verify`` writes ``PULL_VERIFIED.json`` only when every custody audit on every roster run was
collected, reached a verdict and passed, bound to the SHA-256 of the manifest it checked, with the stat
key of every file it verified (taken before the audits, checked unchanged after them); a failed
re-verification revokes an earlier receipt (renamed aside, never deleted). ``runaudit accept`` records the
same verification made on a node other than the producer, and ``--compare`` checks that two acceptances
agree on their scientific core. Whether a receipt is current is decided in one place,
:func:`runaudit.receipts.receipt_status`. Only these two verbs write under ``_trust/pulls/<pull>/``
besides ``pull`` copying the manifest itself.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import runaudit
from runaudit import manifest as manifests
from runaudit.atomic import write_json_atomic
from runaudit.clock import utc_now
from runaudit.ids import is_safe_id
from runaudit.mounts import in_memory
from runaudit.options import FRESH_HASHES_OPTION, PULL_OPTION
from runaudit.receipts import ACCEPTANCE_VERSION, RECEIPT_VERSION, flush_to_disk, folder_snapshot, snapshot
from runaudit.runners.suite import failures, run_suites
from runaudit.safeio import JSON_CAP, read_regular
from runaudit.schema import schema_problems
from runaudit.usage import Refusal, existing_dir

# The receipt audit is what this verification produces, so it cannot be one of its inputs.
VERIFY_ARGS = ("-m", "custody", FRESH_HASHES_OPTION, "-k", "not test_receipt")


def _node(name: str | None) -> dict[str, str]:
    return {"node": name or socket.gethostname(), "tool": "runaudit", "version": runaudit.__version__}


@dataclass
class Verification:
    manifest: manifests.ManifestFile
    holder: Path
    problems: list[str] = field(default_factory=list)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    stat_keys: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def load_manifest(root: Path, pull_id: str) -> manifests.ManifestFile:
    """The pull's manifest, refused unless it is usable as a whole (:func:`manifests.manifest_problems`)."""
    if not is_safe_id(pull_id):
        raise Refusal(f"pull id {pull_id!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$)")
    path = manifests.pulls_dir(root) / pull_id / manifests.MANIFEST
    if not os.path.lexists(path):
        raise Refusal(f"pull {pull_id}: {path} does not exist (copy it from the producer first)")
    manifest = manifests.read_manifest(path)
    if problems := manifests.manifest_problems(manifest):
        raise Refusal(f"pull {pull_id}: {path} is not a usable runaudit.pull/1 manifest: {problems[0]}")
    return manifest


def capsule_holder(root: Path, roster: list[str]) -> Path:
    """``runs/`` on a consumer, ``export/`` on the producer: wherever the roster's capsules are."""
    for holder in (root / "runs", root / "export"):
        if any((holder / run_id).is_dir() for run_id in roster):
            return holder
    return root / "runs"


def verify_pull(root: Path, pull_id: str, *, log: Callable[[str], None] = print) -> Verification:
    """Run every custody audit, hashing fresh, on every roster run of ``pull_id``.

    Runs are audited in parallel sessions, one per core, forked from one interpreter that has imported
    pytest and torch once (:func:`run_suites`).
    """
    manifest = load_manifest(root, pull_id)
    holder = capsule_holder(root, manifest.roster)
    verification = Verification(manifest, holder)
    present = []
    for run_id in manifest.roster:
        if (holder / run_id).is_dir():
            present.append(run_id)
        else:
            verification.problems.append(f"run {run_id}: no capsule at {holder / run_id}")

    for run_id in present:
        log(f"verify {pull_id}: auditing {run_id} at {holder / run_id}")
        if volatile := in_memory(holder / run_id):  # audited all the same; no receipt rests on it
            verification.problems.append(f"run {run_id}: {volatile}; a verified copy must outlive the box")
    listed = [entry["path"] for run_id in present for entry in manifest.entries_of(run_id)]
    verification.problems += flush_to_disk(holder, listed)
    folders_before = folder_snapshot(holder, listed)
    before = snapshot(holder, listed)
    suites = run_suites(
        [holder / run_id for run_id in present], root, args=(*VERIFY_ARGS, PULL_OPTION, pull_id)
    )
    for run_id in present:
        report, output = suites[holder / run_id]
        if report is None:
            verification.problems.append(f"run {run_id}: {output}")
            continue
        verification.problems += [f"run {run_id}: {line}" for line in failures(report)]
        if not report["custody_ok"]:
            verification.problems.append(f"run {run_id}: {report['teardown']['reason']}")
        for item in report["verdicts"]:
            if item["audit"] == "checkpoint.safe_load" and item["verdict"] == "passed":
                evidence = item["evidence"]
                verification.checkpoints[f"{run_id}/{item['subject']}"] = {
                    "sha256": evidence["sha256"],
                    "tensors": evidence["tensors"],
                    "numel": evidence["numel"],
                    "safe_load": True,
                }
    after = snapshot(holder, listed)
    verification.problems += [
        f"{holder / rel} changed while it was being verified" for rel in listed if before[rel] != after[rel]
    ]
    folders_after = folder_snapshot(holder, listed)
    verification.problems += [
        f"{holder.joinpath(rel)}/ was moved, replaced or changed while it was being verified: the bytes hashed may not "
        "be the ones its files hold"
        for rel, key in folders_before.items()
        if folders_after.get(rel) != key
    ]
    verification.stat_keys = before
    if manifests.read_manifest(manifest.path).sha256 != manifest.sha256:
        verification.problems.append(f"{manifest.path} changed while it was being verified")
    return verification


def _record(verification: Verification, version: str, node: str | None) -> dict[str, Any]:
    document = verification.manifest.document
    return {
        "schema_version": version,
        "pull_id": verification.manifest.pull_id,
        "manifest_sha256": verification.manifest.sha256,
        "verifier": _node(node),
        "verified_utc": utc_now(),
        "roster": list(document["roster"]),
        "holder": verification.holder.name,
        "files": document["totals"]["files"],
        "bytes": document["totals"]["bytes"],
        "checkpoints": dict(sorted(verification.checkpoints.items())),
        "stat_keys": verification.stat_keys,
    }


def write_receipt(root: Path, pull_id: str, *, log: Callable[[str], None] = print) -> Verification:
    verification = verify_pull(root, pull_id, log=log)
    receipt = verification.manifest.path.parent / manifests.RECEIPT
    if verification.ok:
        write_json_atomic(receipt, _record(verification, RECEIPT_VERSION, None))
        log(f"verify {pull_id}: every custody audit passed; wrote {receipt}")
    elif receipt.exists():
        revoked = receipt.with_name(f"PULL_VERIFIED.revoked-{utc_now().replace(':', '')}.json")
        os.rename(receipt, revoked)
        log(f"verify {pull_id}: an earlier receipt no longer holds; moved it to {revoked}")
    return verification


def accept(
    root: Path, pull_id: str, node: str | None, *, log: Callable[[str], None] = print
) -> tuple[Verification, Path | None]:
    manifest = load_manifest(root, pull_id)
    independent = node or socket.gethostname()
    if not is_safe_id(
        independent
    ):  # it names the acceptance's file: "../PULL_MANIFEST" overwrote the manifest
        raise Refusal(
            f"accept {pull_id}: node {independent!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$), and it "
            "names the acceptance's file; pass --node NAME"
        )
    producer = manifest.document["producer"]["node"]
    if independent == producer:
        raise Refusal(
            f"pull {pull_id}: node {independent!r} produced this manifest; independent acceptance must run elsewhere"
        )
    verification = verify_pull(root, pull_id, log=log)
    if not verification.ok:
        return verification, None
    record = _record(verification, ACCEPTANCE_VERSION, independent) | {
        "producer": manifest.document["producer"]
    }
    target = manifest.path.parent / manifests.ACCEPTANCES / f"{independent}.json"
    write_json_atomic(target, record)
    return verification, target


SCIENTIFIC_CORE = ("pull_id", "manifest_sha256", "roster", "files", "bytes", "checkpoints")


def compare_acceptances(first: Any, second: Any) -> list[str]:
    """Differences between two acceptances, ignoring who ran them, when and with which versions."""
    problems = [
        f"the {name} file is not a runaudit acceptance record{why}"
        for name, record in (("first", first), ("second", second))
        if (why := _not_an_acceptance(record)) is not None
    ]
    if problems:
        return problems
    nodes = [first["verifier"]["node"], second["verifier"]["node"]]
    producer = first["producer"]["node"]
    if nodes[0] == nodes[1]:
        problems.append(f"both acceptances were made on {nodes[0]}: they are not independent")
    if producer in nodes or second["producer"]["node"] in nodes:
        problems.append(f"an acceptance was made on the producer {producer}")
    problems += [
        f"{key} differs: {json.dumps(first.get(key))[:120]} vs {json.dumps(second.get(key))[:120]}"
        for key in SCIENTIFIC_CORE
        if first.get(key) != second.get(key)
    ]
    return problems


def _not_an_acceptance(record: Any) -> str | None:
    """Why ``record`` is not an acceptance record ("" when it is another kind of document), or None.

    The receipt schema that acceptances share does not require the producer an acceptance must name: a
    receipt passed off as one, or a JSON list, ended in a KeyError or an AttributeError."""
    if not isinstance(record, dict) or record.get("schema_version") != ACCEPTANCE_VERSION:
        return ""
    if problems := schema_problems("receipt", record):
        return f" ({problems[0]})"
    producer = record.get("producer")
    if not isinstance(producer, dict) or not isinstance(producer.get("node"), str):
        return " (it names no producer node)"
    return None


def _report(verification: Verification) -> int:
    for line in verification.problems:
        print(line, file=sys.stderr)
    return 0 if verification.ok else 1


def _verify(args: argparse.Namespace) -> int:
    verification = write_receipt(args.root, args.pull_id, log=lambda line: print(line, file=sys.stderr))
    if not verification.ok:
        print(
            f"verify {args.pull_id}: refused, no receipt written ({len(verification.problems)} problem(s))",
            file=sys.stderr,
        )
    return _report(verification)


def _accept(args: argparse.Namespace) -> int:
    if args.compare:
        records = []
        for path in args.compare:
            try:
                records.append(manifests.load_json(read_regular(path, JSON_CAP)))
            except (OSError, ValueError) as exc:
                raise Refusal(f"cannot read acceptance {path}: {exc}") from None
        problems = compare_acceptances(*records)
        for line in problems:
            print(line, file=sys.stderr)
        print("acceptances match on their scientific core" if not problems else "acceptances differ")
        return 0 if not problems else 1
    if args.root is None or args.pull_id is None:
        raise Refusal("accept needs --root and --pull-id (or --compare A B)")
    verification, target = accept(
        args.root, args.pull_id, args.node, log=lambda line: print(line, file=sys.stderr)
    )
    if target is not None:
        print(f"accept {args.pull_id}: accepted on {args.node or socket.gethostname()}; wrote {target}")
    return _report(verification)


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = verbs.add_parser(
        "verify", help="run the custody audits on a pull and write PULL_VERIFIED.json if all pass"
    )
    verify.add_argument(
        "--root", type=existing_dir, required=True, help="project root holding runs/ and _trust/"
    )
    verify.add_argument("--pull-id", required=True)
    verify.set_defaults(handler=_verify)
    acceptance = verbs.add_parser(
        "accept", help="independent acceptance of a pull on a node other than the producer"
    )
    acceptance.add_argument("--root", type=existing_dir)
    acceptance.add_argument("--pull-id")
    acceptance.add_argument("--node", help="this node's name (default: the host name)")
    acceptance.add_argument("--compare", nargs=2, metavar="ACCEPTANCE", help="compare two acceptance records")
    acceptance.set_defaults(handler=_accept)
