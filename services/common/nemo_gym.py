"""NeMo Gym record shapes (NVIDIA's released Nemotron-Cascade-2 RL data): a row's domain from its
shape, the rules each shape's fields follow, and the helpers verifiers use to read them.

A released row names no domain; which NeMo Gym resources server scores it shows in its fields:
- workbench: `environment_name` (with `ground_truth` calls and `responses_create_params.tools`);
- swe: `instance` {instance_id, FAIL_TO_PASS, PASS_TO_PASS, ...} + `metadata` {relevant_file_contents, image};
- mcqa: `options` (a list of one-key dicts {"A": text}) + `expected_answer` (+ `grading_mode`);
- structured: `schema_str` (+ `schema_type`: json, yaml, toml, csv, xml);
- if: `instruction_id_list` + `kwargs` (entries may be null), at the top or under `verifier_metadata`.
Rows are read as they are: no field is renamed or added to the file. This module knows nothing
about how rows are scored.
"""

from __future__ import annotations

import json
from typing import Any

from services.common.errors import InvalidArgument

MCQA_GRADING_MODES = ("strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "lenient_answer_colon_md")
SCHEMA_TYPES = ("json", "yaml", "xml", "toml", "csv")
IF_GRADING_MODES = ("binary", "fraction")

SHAPE_HINT = (
    "MCQA: options + expected_answer; workbench: environment_name; SWE: instance; "
    "structured: schema_str; IF: instruction_id_list"
)


def infer_domain(data: dict[str, Any]) -> str | None:
    """The domain a row's NeMo Gym shape says, or None when it has no NeMo Gym field at all.

    A row with part of a shape (options but no expected_answer) raises InvalidArgument naming what is missing.
    """
    if data.get("environment_name") is not None:
        from services.common.workbench_task import ENVIRONMENT_NAMES

        if data["environment_name"] not in ENVIRONMENT_NAMES:
            raise InvalidArgument(
                "environment_name", f"{data['environment_name']!r} is not an environment we know {list(ENVIRONMENT_NAMES)}"
            )
        return "workbench"
    if data.get("instance") is not None:
        return "swe"
    has_options, has_answer = data.get("options") is not None, data.get("expected_answer") is not None
    if has_options or has_answer:
        if not (has_options and has_answer):
            missing = "expected_answer" if has_options else "options"
            raise InvalidArgument(missing, "missing: an MCQA row needs both `options` and `expected_answer`")
        return "mcqa"
    if data.get("schema_str"):
        return "structured"
    vm = data.get("verifier_metadata")
    if data.get("instruction_id_list") or (isinstance(vm, dict) and vm.get("instruction_id_list")):
        return "if"
    return None


def decode_json_text(field: str, value: Any) -> Any:
    """`value`, or the JSON it holds when it is a string (the data keeps lists and maps as JSON text)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(field, f"is a string but not valid JSON: {exc.msg}") from None


# ----------------------------------------------------------------------------------------- mcqa


def mcqa_options(options: Any) -> dict[str, str]:
    """Letter -> option text from a list of one-key dicts; null texts dropped (NeMo Gym's allowed letters)."""
    if not isinstance(options, list) or not options:
        raise InvalidArgument("options", f"must be a non-empty list of one-key objects like {{'A': 'text'}}, got {options!r:.80}")
    out: dict[str, str] = {}
    for i, entry in enumerate(options):
        if not isinstance(entry, dict):
            raise InvalidArgument(f"options[{i}]", f"must be an object like {{'A': 'text'}}, got {entry!r:.80}")
        for key, text in entry.items():
            if text is None:
                continue
            if not (isinstance(key, str) and len(key) == 1 and key.isalpha()) or not isinstance(text, str):
                raise InvalidArgument(f"options[{i}]", f"keys must be single letters with text values, got {entry!r:.80}")
            out[key.upper()] = text
    return out


def check_mcqa(rec: Any) -> None:
    letters = mcqa_options(rec.options)
    gold = (rec.expected_answer or "").strip().upper()
    if gold not in letters:
        raise InvalidArgument("expected_answer", f"{rec.expected_answer!r} is not one of the option letters {sorted(letters)}")
    if rec.grading_mode is not None and rec.grading_mode not in MCQA_GRADING_MODES:
        raise InvalidArgument("grading_mode", f"{rec.grading_mode!r} is not one of {list(MCQA_GRADING_MODES)}")


# ------------------------------------------------------------------------------------------- if


def if_fields(task: Any) -> tuple[Any, Any, str | None]:
    """(instruction_id_list, kwargs, grading_mode): `verifier_metadata` first, as NeMo Gym reads them."""
    vm = getattr(task, "verifier_metadata", None) or {}
    ids = vm.get("instruction_id_list", getattr(task, "instruction_id_list", None))
    kwargs = vm.get("kwargs", getattr(task, "kwargs", None))
    mode = vm.get("grading_mode", getattr(task, "grading_mode", None))
    if mode is not None and mode not in IF_GRADING_MODES:
        raise InvalidArgument("grading_mode", f"{mode!r} is not one of {list(IF_GRADING_MODES)}")
    return ids, kwargs, mode


# ---------------------------------------------------------------------------------- structured


def check_structured(rec: Any) -> None:
    if rec.schema_type is not None and str(rec.schema_type).lower() not in SCHEMA_TYPES:
        raise InvalidArgument("schema_type", f"{rec.schema_type!r} is not one of {list(SCHEMA_TYPES)}")


# ------------------------------------------------------------------------------------------ swe


def swe_fields(task: Any) -> dict[str, Any]:
    """The SWE row's parts: instance_id, files (relevant_file_contents), image, tests, mode, test_patch."""
    inst = getattr(task, "instance", None)
    if not isinstance(inst, dict):
        raise InvalidArgument("instance", "must be an object with instance_id, FAIL_TO_PASS, PASS_TO_PASS")
    if not isinstance(inst.get("instance_id"), str) or not inst["instance_id"]:
        raise InvalidArgument("instance.instance_id", "must be a non-empty string")
    tests = {}
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        ids = decode_json_text(f"instance.{key}", inst.get(key, []))
        if not isinstance(ids, list) or not all(isinstance(t, str) for t in ids):
            raise InvalidArgument(f"instance.{key}", "must be a list of test ids (or its JSON text)")
        tests[key] = ids
    if not tests["FAIL_TO_PASS"]:
        raise InvalidArgument("instance.FAIL_TO_PASS", "must list at least one test id")
    meta = getattr(task, "metadata", None) or {}
    files = decode_json_text("metadata.relevant_file_contents", meta.get("relevant_file_contents"))
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) for v in files.values()):
        raise InvalidArgument("metadata.relevant_file_contents", "must map file paths to their text (or be its JSON text)")
    image = meta.get("image")
    if image is not None and not isinstance(image, str):
        raise InvalidArgument("metadata.image", f"must be a string, got {image!r:.80}")
    mode = (getattr(task, "model_extra", None) or {}).get("mode", "eval")
    if mode not in ("eval", "repro-gen"):
        raise InvalidArgument("mode", f"{mode!r} is not 'eval' or 'repro-gen'")
    return {
        "instance_id": inst["instance_id"], "files": files, "image": image, "mode": mode,
        "fail_to_pass": tests["FAIL_TO_PASS"], "pass_to_pass": tests["PASS_TO_PASS"],
        "remove_repo_name": bool(meta.get("remove_repo_name", False)),
    }


def check_swe(rec: Any) -> None:
    swe_fields(rec)


# ------------------------------------------------------------------------------------ workbench


def check_workbench(rec: Any) -> None:
    from services.common.workbench_task import from_nemo_gym

    from_nemo_gym({**(rec.model_extra or {}), "id": rec.id, "ground_truth": rec.ground_truth,
                   "category": rec.category, "environment_name": rec.environment_name})
