"""`cascade reward score`: score JSONL (task record + `response` per line), in-process or via a service.

Output (stdout or --output): one `{"id", "domain", "reward", "verdict", "reason"}` line per input
line, in order — the same results in-process (settings from CASCADE_REWARD_*) and over gRPC.
Heavy imports (grpc, the verifiers) happen inside the command so `cascade --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

app = typer.Typer(help="Reward scoring with the domain verifiers.", no_args_is_help=True)

CHUNK = 64


def read_items(path: Path, skip_unscored: bool = False) -> list[tuple[str, str, str, str]]:
    """(task_json, response, id, domain) per non-blank line; a bad line is an InvalidArgument naming file, line, field.

    A row of a domain the reward service does not score (workbench: multi-turn, scored by end state)
    is refused naming its line, or, with `skip_unscored`, left out and counted on stderr.
    """
    from services.common.errors import InvalidArgument
    from services.common.tasks import TaskRecord
    from services.reward.verifiers import UNSCORED

    items, skipped = [], []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidArgument(f"{path}:{n}", f"not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("response"), str):
                raise InvalidArgument(f"{path}:{n}: response", "every line needs a string `response` field")
            response = record.pop("response")
            try:
                task = TaskRecord.parse(record)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{path}:{n}: {exc.field}", exc.message) from None
            if task.domain in UNSCORED:
                if not skip_unscored:
                    raise InvalidArgument(
                        f"{path}:{n}: domain", f"{task.domain!r} is not scored here: {UNSCORED[task.domain]} "
                        "(--skip-unscored leaves such rows out)",
                    )
                skipped.append(n)
                continue
            items.append((json.dumps(record, ensure_ascii=False), response, task.id, task.domain))
    if skipped:
        print(f"skipped {len(skipped)} row(s) not scored here (lines {', '.join(map(str, skipped))})", file=sys.stderr)
    if not items:
        raise InvalidArgument(str(path), "no records (expected JSONL task records with a `response` field)")
    return items


def _row(item: tuple, reward: float, verdict: str, reason: str) -> dict:
    return {"id": item[2], "domain": item[3], "reward": reward, "verdict": verdict, "reason": reason}


def _score_local(chunk: list[tuple], core) -> list[dict]:
    scored = core.score([(t, r) for t, r, _, _ in chunk])
    return [_row(item, s.outcome.reward, s.outcome.verdict, s.outcome.reason) for item, s in zip(chunk, scored)]


def _score_remote(chunk: list[tuple], client, timeout: float) -> list[dict]:
    from services.common.pb import reward_pb2
    from services.reward.server import PB_TO_VERDICT

    request = reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json=t, response=r) for t, r, _, _ in chunk])
    reply = client.call("Score", request, timeout=timeout)
    return [_row(item, res.reward, PB_TO_VERDICT[res.verdict], res.reason) for item, res in zip(chunk, reply.results)]


@app.command("score")
def score(
    input: Path = typer.Option(..., "--input", "-i", exists=True, dir_okay=False, help="JSONL: task record + `response`."),
    server: str | None = typer.Option(None, "--server", help="Score via reward service(s) host:port[,host:port]; default in-process."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write JSONL here instead of stdout."),
    timeout: float = typer.Option(300.0, "--timeout", min=1, help="Deadline of one gRPC call of up to 64 items, seconds."),
    skip_unscored: bool = typer.Option(
        False, "--skip-unscored", help="Leave out rows the reward service does not score (workbench) instead of refusing the file."
    ),
) -> None:
    """Print one {"id", "domain", "reward", "verdict", "reason"} line per input line, in order."""
    from rich.progress import Progress

    items = read_items(input, skip_unscored)
    if server:
        from services.common.grpc_client import ReplicaClient
        from services.common.pb import reward_pb2_grpc

        backend = ReplicaClient(server, reward_pb2_grpc.RewardServiceStub)
        run = lambda chunk: _score_remote(chunk, backend, timeout)
    else:
        from services.reward.config import RewardConfig
        from services.reward.core import RewardCore

        backend = RewardCore(RewardConfig())
        run = lambda chunk: _score_local(chunk, backend)
    sink = output.open("w", encoding="utf-8") if output else sys.stdout
    try:
        with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
            job = bar.add_task("scoring", total=len(items))
            for start in range(0, len(items), CHUNK):
                for row in run(items[start : start + CHUNK]):
                    sink.write(json.dumps(row, ensure_ascii=False) + "\n")
                bar.advance(job, len(items[start : start + CHUNK]))
    finally:
        if output:
            sink.close()
        backend.close()
