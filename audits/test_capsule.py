"""Capsule gate (custody): the sealed capsule matches the contract of docs/capsule.md §2–7, exactly.

Each defect is reported by one audit: the file's owner fails, every audit that needed it says not_run.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from runaudit.capsule import CHECKPOINT_FILES, checkpoint_file
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.history import load_history, train_csv_problems
from runaudit.ids import casefold_collisions, duplicates, is_safe_id
from runaudit.reader import CapsuleReader, Unavailable
from runaudit.renders import RenderBudget, RendersPastBudget, check_whole_png, opened_render
from runaudit.run import DeclaredMetric, DeclaredTest, Run
from runaudit.schema import schema_problems

pytestmark = pytest.mark.custody

SHOWN = 5  # examples named in a one-line message; the evidence keeps them all
INVENTORY_KEYS = frozenset({"files", "roster", "inventory", "sizes", "bytes", "file_list", "manifest"})
GROUND_TRUTH_ROLES = frozenset({"ground_truth", "gt", "target", "label", "error", "err", "diff", "residual"})
OVERLAY_TASKS = frozenset({"segmentation", "detection"})
NO_GT = "unavailable_no_machine_readable_gt"


def _examples(items: Iterable[Any]) -> str:
    items = list(items)
    shown = ", ".join(map(str, items[:SHOWN]))
    return f"{shown}, ... ({len(items)} in all)" if len(items) > SHOWN else shown


def _objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list that should hold only objects (anything else is the schema's to report)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _declared_checkpoint_sha(run: Run) -> str | None:
    if run.kind == "hardware":
        binding = run.get("model_run")
        return binding.get("best_sha256") if isinstance(binding, Mapping) else None
    checkpoints = run.get("checkpoints")
    best = checkpoints.get("best") if isinstance(checkpoints, Mapping) else None
    return best.get("sha256") if isinstance(best, Mapping) else None


# -- layout -----------------------------------------------------------------------------------------


def test_required_paths(run: Run, capsule: CapsuleReader, audit: AuditRecorder, required_path: str) -> None:
    """Each required path exists with its type, else fails: ``run.json`` (and in a software capsule
    ``config.yaml``, ``train.csv``, ``best.pth`` or ``best.safetensors``), the ``test/`` folder, and per
    declared test ``metrics.json``, ``results.parquet`` and the ``vis/`` folder.
    """
    expected = "dir" if required_path == "test" or required_path.endswith("/vis") else "file"
    entries = capsule.inventory.entries
    folder = "/".join(required_path.split("/")[:2])
    if folder != required_path and getattr(entries.get(folder), "kind", None) != "dir":
        owner = "capsule.tests_declared" if "test" in entries else "capsule.required_paths"
        audit.not_run(f"{folder}/ is absent, so {required_path} is not checked (reported by {owner})")
    entry = entries.get(required_path)
    if entry is None:
        role = required_path.rsplit(".", 1)[0]
        named = checkpoint_file(role, ()).alternatives if required_path in CHECKPOINT_FILES else required_path
        audit.fail(f"run {run.run_id}: {named} is missing; a sealed {run.kind} capsule requires it")
    audit.require(
        entry.kind == expected,
        f"run {run.run_id}: {required_path} is a {entry.kind}, expected a regular {expected}",
    )


def test_forbidden_paths(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """No forbidden path anywhere in the capsule, else fails: symlinks, special files, ``latest.pth``,
    status sentinels, custody records, ``*.tmp``, OS junk, legacy top-level folders, or weights in a
    hardware capsule.
    """
    found = capsule.inventory.forbidden
    audit.evidence(forbidden=[{"path": item.rel, "rule": item.rule} for item in found])
    audit.require(
        not found,
        f"run {run.run_id}: {len(found)} forbidden path(s): "
        + _examples(f"{item.rel} ({item.rule})" for item in found),
    )


def test_closed_world(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """Every path in the capsule belongs to its grammar (docs/capsule.md §2); any stray file or folder fails,
    and so does a checkpoint role held in two formats (``best.pth`` beside ``best.safetensors``).

    Files under an undeclared test folder are left to ``capsule.tests_declared``, forbidden paths to
    ``capsule.forbidden_paths``, so each defect is reported once.
    """
    stray = capsule.inventory.stray
    ambiguous = [" and ".join(checkpoint.found) for checkpoint in capsule.inventory.ambiguous]
    audit.evidence(stray=list(stray), ambiguous_checkpoints=ambiguous)
    problems = [f"{len(stray)} path(s) outside the capsule grammar: {_examples(stray)}"] if stray else []
    problems += [f"{pair} both present: a capsule holds one checkpoint format per role" for pair in ambiguous]
    audit.require(not problems, f"run {run.run_id}: {'; '.join(problems)}")


def test_ids(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """Names on disk are safe ids; no two names of one level, found or declared, differ only in case.

    The syntax and uniqueness of the ids run.json declares belong to its schema (capsule.run_json_schema),
    a test declared twice to capsule.tests_declared: each defect is reported once.
    """
    found: dict[str, list[str]] = {"test folders": list(capsule.inventory.test_dirs)}
    for test_id, rels in capsule.inventory.pngs.items():
        for level, position in (("conditions", 3), ("roles", 4), ("samples", 5)):
            at_level = {rel.split("/")[position] for rel in rels}
            if level == "samples":
                at_level = {name[: -len(".png")] for name in at_level}
            found[f"{level} of test {test_id}"] = sorted(at_level)
    declared: dict[str, list[str]] = {}
    problems: list[str] = []
    if run.declared is not None:
        if run.claimed_id != run.path.name:
            problems.append(f"folder {run.path.name!r} differs from run_id {run.claimed_id!r}")
        declared["declared tests"] = [test.test_id for test in run.tests]
        for test in run.tests:
            declared[f"conditions declared by {test.test_id}"] = list(test.conditions)
            declared[f"roles declared by {test.test_id}"] = list(test.roles)
    for level, names in found.items():
        unsafe = [name for name in names if not is_safe_id(name)]
        if unsafe:
            problems.append(f"unsafe {level}: {_examples(map(repr, unsafe))}")
    for level, names in {**found, **declared}.items():
        for group in casefold_collisions(set(names)):
            problems.append(f"{level} collide after case folding: {' / '.join(group)}")
    audit.evidence(problems=problems)
    audit.require(not problems, f"run {run.run_id}: {len(problems)} id problem(s): {_examples(problems)}")


# -- declarations -----------------------------------------------------------------------------------


def _inventory_keys(value: Any, pointer: str = "") -> list[str]:
    """Places where run.json enumerates files, which only the external pull manifest may do (outermost)."""
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            where = f"{pointer}/{key}"
            found.extend([where] if key in INVENTORY_KEYS else _inventory_keys(item, where))
        return found
    if isinstance(value, list):
        if any(
            isinstance(item, dict) and "path" in item and {"sha256", "bytes"} & item.keys() for item in value
        ):
            return [pointer or "/"]
        return [
            found for index, item in enumerate(value) for found in _inventory_keys(item, f"{pointer}/{index}")
        ]
    return []


def test_run_json_schema(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """``run.json`` is a JSON object that validates against ``runaudit.run/1``, lists no file inventory and
    declares in ``selections[]`` every selection its tests name; any breach fails.

    The file inventory belongs to the external pull manifest, never to the capsule it describes.
    """
    document = audit.need(capsule.json, "run.json")
    audit.require(isinstance(document, dict), f"run {run.run_id}: run.json is not a JSON object")
    inventory = _inventory_keys(document)
    problems = [
        f"lists capsule files at {pointer} (the inventory belongs to the pull manifest)"
        for pointer in inventory
    ]
    problems += schema_problems("run", document)
    declared_selections = {item.get("selection_id") for item in _objects(document.get("selections"))}
    for test in run.tests:
        if test.selection_id and test.selection_id not in declared_selections:
            problems.append(
                f"test {test.test_id} names selection {test.selection_id}, absent from selections[]"
            )
    audit.evidence(problems=problems)
    audit.require(
        not problems,
        f"run {run.run_id}: run.json breaks the runaudit.run/1 contract: {_examples(problems)}",
    )


def test_config_hash(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """``config.yaml`` parses as one mapping and its SHA-256 equals ``config.sha256`` in ``run.json``; a
    different hash (the configuration changed after the run was declared) fails.
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules carry no config.yaml")
    audit.need(capsule.config)  # one resolved mapping, parsed only as a bounded tree (no alias bombs)
    config = run.get("config")
    expected = config.get("sha256") if isinstance(config, Mapping) else None
    if not isinstance(expected, str):
        audit.not_run("run.json declares no config.sha256 (reported by capsule.run_json_schema)")
    found = capsule.sha256("config.yaml")
    audit.evidence(expected=expected, found=found)
    audit.require(
        found == expected,
        f"run {run.run_id}: config.yaml has sha256 {found[:12]}…, run.json binds {expected[:12]}…: "
        "the configuration changed after the run was declared",
    )


def test_train_csv(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """``train.csv`` has the columns ``epoch``, ``step`` and ``train_loss``, no repeated column, at least one
    row, and rows of the header's width with integer ``epoch``/``step`` and numeric values in the columns
    docs/capsule.md §6 recognises (optional ones may be empty); no row logs an epoch or step past run.json's
    ``training.epochs_run``/``steps_run`` (a run.json written before training went on: a finished run
    reopened, trained further and sealed with its first finish); anything else fails.
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules carry no training history")
    header, rows = audit.need(capsule.csv_rows, "train.csv")
    problems = train_csv_problems(capsule)
    audit.evidence(rows=len(rows), columns=header, problems=problems[:100], problem_count=len(problems))
    audit.require(not problems, f"run {run.run_id}: train.csv {_examples(problems)}")
    training = run.get("training") if run.declared is not None else None
    if isinstance(training, Mapping):  # its shape is capsule.run_json_schema's to judge
        history = load_history(capsule)
        for column, key in (("epoch", "epochs_run"), ("step", "steps_run")):
            stated, logged = training.get(key), history.values[column]
            last = max((int(value) for value in logged if math.isfinite(value)), default=None)
            if isinstance(stated, int) and not isinstance(stated, bool) and last is not None:
                audit.require(
                    last <= stated,
                    f"run {run.run_id}: train.csv logs {column} {last}, past run.json's training.{key} "
                    f"{stated}: run.json was written before training went on (docs/capsule.md §6)",
                )


def test_tests_declared(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """``run.json`` declares at least one test, none twice, and the folders under ``test/`` are exactly the
    declared tests; an undeclared folder or a declared test without one fails.
    """
    if run.declared is None:
        audit.not_run(f"run.json is unreadable (reported by capsule.run_json_schema): {run.problem}")
    if getattr(capsule.inventory.entries.get("test"), "kind", None) != "dir":
        audit.not_run(f"run {run.run_id} has no test/ folder (reported by capsule.required_paths)")
    declared = [test.test_id for test in run.tests]
    found = set(capsule.inventory.test_dirs)
    audit.evidence(declared=declared, found=sorted(found))
    audit.require(
        bool(declared), f"run {run.run_id}: run.json declares no tests; a capsule needs at least one"
    )
    audit.require(not duplicates(declared), f"run {run.run_id}: tests declared twice: {duplicates(declared)}")
    undeclared = sorted(found - set(declared))
    absent = sorted(set(declared) - found)
    audit.require(
        not undeclared and not absent,
        f"run {run.run_id}: test folders differ from run.json tests: "
        f"undeclared folder(s) {undeclared or 'none'}; declared but absent {absent or 'none'}",
    )


# -- per test -------------------------------------------------------------------------------------


def test_metrics_schema(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """The test's ``metrics.json`` validates against its schema and agrees with ``run.json`` (ids, split,
    ``n_test``, protocol, ground-truth branch, checkpoint hash) and the protocol (one row per declared
    metric × condition, with the protocol's direction, aggregation and precision); any mismatch fails.
    """
    test = audit.declared(run, declared_test)
    rel = f"{test.folder}/metrics.json"
    problems = list(audit.need(capsule.metrics_problems, test))
    audit.require(not problems, f"run {run.run_id}: {rel}: {_examples(problems)}", problems=problems)
    document = capsule.metrics(test)
    expected = {
        "run_id": run.run_id,
        "test_id": test.test_id,
        "split": test.split,
        "n_test": test.n_test,
        "protocol_id": run.protocol_id,
        "ground_truth_status": test.ground_truth_status,
        "metric_applicability": test.metric_applicability,
        "checkpoint_sha256": _declared_checkpoint_sha(run),
    }
    for key, value in expected.items():  # a value run.json lacks is its schema's to report
        if value is not None and key in document and document[key] != value:
            problems.append(f"{key} is {document[key]!r}, run.json declares {value!r}")
    rows = document["metrics"]
    if test.metrics_apply:
        protocol = {metric.name: metric for metric in run.metrics}
        keys = [(row.get("metric"), row.get("condition_id")) for row in rows]
        for row in rows:
            declared = protocol.get(row.get("metric"))
            if declared is None:
                problems.append(f"metric {row.get('metric')!r} is not in the protocol")
                continue
            for field in ("direction", "aggregation", "precision"):
                if row.get(field) != getattr(declared, field):
                    problems.append(
                        f"{declared.name}/{row.get('condition_id')}: {field} {row.get(field)!r}, "
                        f"protocol declares {getattr(declared, field)!r}"
                    )
            if row.get("condition_id") not in test.conditions:
                problems.append(
                    f"condition {row.get('condition_id')!r} is not declared by test {test.test_id}"
                )
        problems += [f"{metric}/{condition} listed twice" for metric, condition in duplicates(keys)]
        expected_keys = {(name, condition) for name in protocol for condition in test.conditions}
        absent = sorted(expected_keys - set(keys))
        problems += [f"no value for {metric}/{condition}" for metric, condition in absent]
    audit.evidence(problems=problems)
    audit.require(not problems, f"run {run.run_id}: {rel}: {_examples(problems)}")


def test_results_table(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """The test's ``results.parquet`` keeps its contract, else fails: the required columns and types, no
    nulls, one row per declared condition × sample with no repeated key and the same samples in every
    condition, and no row ``valid`` where ``forward_finite`` is false.

    Every audit that computes on the table reads it only after this contract holds, else says not_run.
    """
    test = audit.declared(run, declared_test)
    rel = f"{test.folder}/results.parquet"
    problems = list(audit.need(capsule.results_problems, test))
    audit.evidence(rows=capsule.table_rows(rel), problems=problems)
    audit.require(not problems, f"run {run.run_id}: {rel}: {_examples(problems)}")


def _split_test_ids(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, test: DeclaredTest
) -> tuple[Any, str]:
    """The ids of the test split (an Arrow array): from the bound split manifest, else results.parquet."""
    from runaudit.splits import load_manifest

    if isinstance(run.get("split"), Mapping):
        try:
            manifest = load_manifest(run)  # read once, within its contract, as the leakage audits read it
        except Unavailable as exc:
            # The manifest is the leakage audits' input; the scored test items still bound the selection.
            audit.evidence(split_manifest_problem=str(exc))
        else:
            if test.split in manifest.split_rows:
                return manifest.column("sample_id", test.split), manifest.rel
            import pyarrow as pa

            return pa.array([], pa.string()), manifest.rel  # a split the manifest has no rows of
    table = audit.need(capsule.results, test)
    return table.column("sample_id"), f"{test.folder}/results.parquet"


def test_selection(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """The test's selection file is the one ``run.json`` binds by SHA-256, validates, is not
    ``performance_ranked``, holds ``k = min(100, n_test)`` distinct sample ids, all in the test split
    (from the bound split manifest, else ``results.parquet``); any breach fails.

    A selection chosen by score shows the model's best cases, not a fair sample of the test set.
    """
    test = audit.declared(run, declared_test)
    sid = test.selection_id
    declared = run.selections.get(sid) if sid else None
    if declared is None:
        audit.not_run(
            f"test {test.test_id} names selection {sid!r}, which run.json selections[] lacks "
            "(reported by capsule.run_json_schema)"
        )
    document, sha = audit.need(capsule.trust_json, "selections", f"{sid}.json")
    where = f"_trust/selections/{sid}.json"
    audit.require(
        not (isinstance(document, dict) and document.get("performance_ranked") is True),
        f"run {run.run_id}: {where} is performance_ranked: a selection chosen by score shows the model's "
        "best cases; it must be fixed per test set, before any model is scored",
    )
    audit.require(
        sha == declared.get("sha256"),
        f"run {run.run_id}: {where} has sha256 {sha[:12]}…, run.json binds {str(declared.get('sha256'))[:12]}…",
    )
    problems = schema_problems("selection", document)
    audit.require(not problems, f"run {run.run_id}: {where}: {_examples(problems)}", problems=problems)
    ids = document["sample_ids"]
    n_test = test.n_test or 0
    k = min(100, n_test)
    checks = {
        f"selection_id is {document['selection_id']!r}, expected {sid!r}": document["selection_id"] == sid,
        f"n_test is {document['n_test']}, test {test.test_id} declares {n_test}": document["n_test"]
        == n_test,
        f"k is {document['k']}, expected min(100, n_test) = {k}": document["k"] == k,
        f"lists {len(ids)} sample ids, k is {document['k']}": len(ids) == document["k"],
        f"run.json binds k={declared.get('k')}, the file says {document['k']}": declared.get("k")
        == document["k"],
        f"repeats sample ids {_examples(duplicates(ids))}": not duplicates(ids),
    }
    problems = [message for message, holds in checks.items() if not holds]
    audit.require(not problems, f"run {run.run_id}: {where}: {_examples(problems)}", problems=problems)
    import pyarrow as pa
    import pyarrow.compute as pc

    test_ids, source = _split_test_ids(run, capsule, audit, test)
    selected = pa.array(ids, pa.string())
    outside = selected.filter(pc.invert(pc.is_in(selected, value_set=test_ids.cast(pa.string())))).to_pylist()
    audit.evidence(k=k, method=document["method"], ids_checked_against=source)
    audit.require(
        not outside,
        f"run {run.run_id}: {where} selects {len(outside)} id(s) outside the test split "
        f"({source}): {_examples(outside)}",
    )


def test_vis_coverage(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """The PNGs under the test's ``vis/`` are exactly the declared conditions × roles × selected samples;
    a missing render, an extra one or an extra folder fails.
    """
    test = audit.declared(run, declared_test)
    prefix = f"{test.folder}/vis/"
    if getattr(capsule.inventory.entries.get(prefix[:-1]), "kind", None) != "dir":
        audit.not_run(f"{prefix} is absent (reported by capsule.required_paths)")
    ids = audit.need(capsule.selection, test)
    expected = {(c, r, s) for c in test.conditions for r in test.roles for s in ids}
    found = capsule.inventory.vis_keys(test.test_id)
    folders = {
        tuple(rel[len(prefix) :].split("/"))
        for rel, entry in capsule.inventory.entries.items()
        if rel.startswith(prefix) and entry.kind == "dir"
    }
    allowed = {(c,) for c in test.conditions} | {(c, r) for c in test.conditions for r in test.roles}
    missing = sorted(expected - found)
    extra = sorted(found - expected)
    extra_folders = sorted("/".join(parts) + "/" for parts in folders - allowed)
    audit.evidence(
        expected=len(expected),
        found=len(found),
        missing=["/".join(key) + ".png" for key in missing[:100]],
        extra=["/".join(key) + ".png" for key in extra[:100]] + extra_folders,
    )
    audit.require(
        not missing and not extra and not extra_folders,
        f"run {run.run_id}: {prefix} covers {len(found & expected)}/{len(expected)} of conditions × roles × "
        f"selection; missing {len(missing)}"
        + (f" (e.g. {'/'.join(missing[0])}.png)" if missing else "")
        + f", extra {len(extra) + len(extra_folders)}"
        + (
            f" (e.g. {('/'.join(extra[0]) + '.png') if extra else extra_folders[0]})"
            if extra or extra_folders
            else ""
        ),
    )


def test_vis_decode(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """Every PNG under the test's ``vis/`` is one whole PNG (every chunk's CRC right, IHDR first, IEND last,
    the image data inflating to exactly what the header implies) that decodes to at least 1×1 pixels, and
    the renders of one condition and role share one size; a broken, empty or mixed-size render fails.

    The byte-level check comes first because Pillow's decoder is lenient: a render holding 2 of its 64
    rows decoded with the rest black, and a corrupt IDAT chunk decoded without a word.
    """
    test = audit.declared(run, declared_test)
    rels = capsule.inventory.pngs.get(test.test_id, ())
    if not rels:
        audit.not_run(f"test {test.test_id} has no PNGs to decode (reported by capsule.vis_coverage)")
    sizes: dict[tuple[str, str], Counter[tuple[int, int]]] = defaultdict(Counter)
    broken, budget, undecoded, left_over = [], RenderBudget(), "", 0
    for index, rel in enumerate(rels):
        *_, condition, role, _name = rel.split("/")
        try:
            with capsule.open(rel) as handle, opened_render(handle, budget) as image:
                check_whole_png(handle)
                image.load()
                size = image.size
        except RendersPastBudget as exc:
            left_over = len(rels) - index
            undecoded = f"{left_over} render(s) from {rel} on were not decoded: {exc}"
            break
        except Exception as exc:  # Pillow signals bad data with several exception types
            broken.append(f"{rel} ({type(exc).__name__}: {exc})")
            continue
        if size[0] < 1 or size[1] < 1:
            broken.append(f"{rel} (empty image {size[0]}×{size[1]})")
        sizes[(condition, role)][size] += 1
    mixed = [
        f"{condition}/{role} mixes sizes {sorted(counter)}"
        for (condition, role), counter in sorted(sizes.items())
        if len(counter) > 1
    ]
    decoded = len(rels) - len(broken) - left_over
    audit.evidence(decoded=decoded, broken=broken[:100], mixed_sizes=mixed, undecoded=undecoded or None)
    audit.require(
        not broken and not mixed and not undecoded,
        f"run {run.run_id}: {len(broken)} of {len(rels)} PNG(s) under {test.folder}/vis do not decode"
        + (f": {_examples(broken)}" if broken else "")
        + (f"; {_examples(mixed)}" if mixed else "")
        + (f"; {undecoded}" if undecoded else ""),
    )


def test_metrics_rederived(
    run: Run,
    capsule: CapsuleReader,
    audit: AuditRecorder,
    declared_metric: tuple[DeclaredTest, DeclaredMetric] | None,
) -> None:
    """Each ``metrics.json`` value, recomputed from the valid rows of ``results.parquet`` with its declared
    aggregation (``mean``, ``median``, ``sum_ratio``, ``iqm``), matches within half a unit of its last
    declared decimal; a larger difference fails.

    A headline number that does not follow from the per-item results cannot be trusted.
    """
    if declared_metric is None:
        audit.declared(run, run.tests[0] if run.tests else None)
        if not any(test.metrics_apply for test in run.tests):
            audit.not_applicable("no declared test has applicable metrics (no machine-readable ground truth)")
        audit.not_run(f"run {run.run_id} declares no protocol metrics (reported by capsule.run_json_schema)")
    test, metric = declared_metric
    if metric.aggregation not in ("mean", "median", "sum_ratio", "iqm") or metric.precision is None:
        audit.not_run(
            f"metric {metric.name} declares no usable aggregation/precision (reported by capsule.run_json_schema)"
        )
    document = audit.need(capsule.metrics, test)
    table = audit.need(capsule.results, test)
    import pyarrow.compute as pc

    from runaudit.statistics import headline_value

    # Every row is compared, a condition listed twice included (keyed by condition, the last one won and a
    # wrong first value, the one a reader sees first, went unchecked; capsule.metrics_schema fails the twin).
    declared_rows: dict[str, list[dict[str, Any]]] = {}
    for row in document["metrics"]:
        if row["metric"] == metric.name:
            declared_rows.setdefault(row["condition_id"], []).append(row)
    scored = table.filter(table.column("valid"))
    ratio = metric.aggregation == "sum_ratio"
    tolerance = 0.5 * 10 ** (-metric.precision) + 1e-12
    compared, mismatches = {}, []
    for condition in test.conditions:
        if condition not in declared_rows:
            continue
        rows = scored.filter(pc.equal(scored.column("condition_id"), condition))
        values = rows.column(f"m.{metric.name}").to_numpy()
        numerators = rows.column(f"num.{metric.name}").to_numpy() if ratio else values
        denominators = rows.column(f"den.{metric.name}").to_numpy() if ratio else values
        recomputed = headline_value(metric.aggregation, values, numerators, denominators)
        for listed, row in enumerate(declared_rows[condition], start=1):
            declared_value = row["value"]
            key = condition if listed == 1 else f"{condition} (its listing {listed})"
            compared[key] = {"declared": declared_value, "recomputed": recomputed, "n": rows.num_rows}
            if declared_value is None or not abs(declared_value - recomputed) <= tolerance:
                mismatches.append(
                    f"{key}: declared {declared_value}, re-derived {recomputed:.{metric.precision + 2}f}"
                )
    if not compared:
        audit.not_run(
            f"{test.folder}/metrics.json has no {metric.name} rows (reported by capsule.metrics_schema)"
        )
    audit.evidence(tolerance=tolerance, aggregation=metric.aggregation, conditions=compared)
    audit.require(
        not mismatches,
        f"run {run.run_id}: {test.folder}/metrics.json {metric.name} does not re-derive from results.parquet "
        f"at {metric.precision} decimals: {_examples(mismatches)}",
    )


def _branch_problem(test: DeclaredTest) -> tuple[str, str] | None:
    """Why the test's ground-truth branch is undeclared or self-contradictory, and which audit says so."""
    status, applicability = test.ground_truth_status, test.metric_applicability
    if status is None or applicability is None:
        return (
            f"test {test.test_id} declares no ground_truth_status or metric_applicability, and the branch "
            "is never inferred from absent files",
            "capsule.run_json_schema",
        )
    if (status == NO_GT) != (applicability == "not_applicable"):
        wanted = "not_applicable" if status == NO_GT else "applicable"
        return (
            f"test {test.test_id}: ground_truth_status={status} requires metric_applicability={wanted}, "
            f"found {applicability}",
            "capsule.ground_truth_branch",
        )
    return None


def test_n_scored(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """``n_scored`` in ``metrics.json`` is 0 exactly when the test's metrics do not apply, and otherwise
    positive and equal to the valid rows of ``results.parquet`` in every declared condition; else fails.
    """
    test = audit.declared(run, declared_test)
    problem = _branch_problem(test)
    if problem is not None:
        audit.not_run(f"{problem[0]} (reported by {problem[1]})")
    n_scored = audit.need(capsule.metrics, test)["n_scored"]
    where = f"run {run.run_id}: {test.folder}/metrics.json"
    if not test.metrics_apply:
        audit.require(
            n_scored == 0, f"{where}: n_scored is {n_scored}, but metrics do not apply to this test"
        )
        audit.note("metrics do not apply; n_scored is 0")
        return
    table = audit.need(capsule.results, test)
    scored = table.filter(table.column("valid")).group_by("condition_id").aggregate([([], "count_all")])
    counts = dict(
        zip(scored.column("condition_id").to_pylist(), scored.column("count_all").to_pylist(), strict=True)
    )
    audit.evidence(n_scored=n_scored, valid_rows=counts)
    audit.require(
        n_scored > 0,
        f"{where}: n_scored is 0 although the test declares its metrics applicable: "
        "a metric over zero items is not a result",
    )
    wrong = {
        condition: counts.get(condition, 0)
        for condition in test.conditions
        if counts.get(condition, 0) != n_scored
    }
    audit.require(not wrong, f"{where}: n_scored is {n_scored}, but results.parquet has valid rows {wrong}")


def test_ground_truth_branch(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """The test declares a consistent ground-truth branch (``metric_applicability`` is ``not_applicable``
    exactly when ``ground_truth_status`` is ``unavailable_no_machine_readable_gt``), and a test without
    ground truth reports no metrics, carries no metric columns, has every row ``forward_finite``, declares
    no ground-truth or error role and has a ``prediction`` role (and ``overlay`` for segmentation or
    detection); else fails.
    """
    test = audit.declared(run, declared_test)
    where = f"run {run.run_id}: test {test.test_id}"
    problem = _branch_problem(test)
    if problem is not None:
        message, owner = problem
        if owner != audit.id:
            audit.not_run(f"{message} (reported by {owner})")
        audit.fail(f"run {run.run_id}: {message}")
    if test.ground_truth_status != NO_GT:
        audit.note("ground truth available; metrics apply")
        return
    document = audit.need(capsule.metrics, test)
    table = audit.need(capsule.results, test)
    import pyarrow.compute as pc

    problems = []
    reported = sorted({row["metric"] for row in document["metrics"]})
    if reported:
        problems.append(f"metrics.json reports GT-derived metric(s) {reported}")
    metric_columns = [name for name in table.column_names if name.startswith(("m.", "num.", "den."))]
    if metric_columns:
        problems.append(f"results.parquet carries metric column(s) {metric_columns}")
    nonfinite = table.num_rows - (pc.sum(table.column("forward_finite")).as_py() or 0)
    if nonfinite:
        problems.append(f"{nonfinite} row(s) are not forward_finite")
    gt_roles = sorted(set(test.roles) & GROUND_TRUTH_ROLES)
    if gt_roles:
        problems.append(f"declares ground-truth/error role(s) {gt_roles}")
    needed = {"prediction"} | ({"overlay"} if run.task in OVERLAY_TASKS else set())
    if needed - set(test.roles):
        problems.append(f"lacks role(s) {sorted(needed - set(test.roles))}")
    audit.evidence(problems=problems)
    audit.require(
        not problems,
        f"{where}: declared without machine-readable ground truth, yet {_examples(problems)}",
    )
