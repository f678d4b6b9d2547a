"""The store: atomic versioned publishing, chunked streaming, checkpoint tags, the journal."""

from __future__ import annotations

import json
from collections import OrderedDict

import pytest

from services.common.checksum import sha256_dir
from services.common.errors import InvalidArgument, NotFound
from services.trainer.store import Store, check_tag


def write_files(files: dict[str, bytes]):
    def write(directory):
        for name, data in files.items():
            (directory / name).write_bytes(data)

    return write


def test_publish_numbers_versions_and_records_the_checksum(tmp_path):
    store = Store(tmp_path)
    assert store.latest_version() == 0
    v1, p1, sha1 = store.publish(write_files({"a.bin": b"x" * 10, "config.json": b"{}"}))
    v2, p2, sha2 = store.publish(write_files({"a.bin": b"y" * 10}))
    assert (v1, v2) == (1, 2) and p2 == tmp_path / "weights" / "v2"
    assert sha1 == sha256_dir(p1) and store.version_sha(1) == sha1 and store.version_sha(0) == sha2
    assert Store(tmp_path).latest_version() == 2  # a restarted trainer continues the numbering


def test_failed_publish_leaves_no_version_behind(tmp_path):
    store = Store(tmp_path)

    def boom(directory):
        (directory / "half.bin").write_bytes(b"1")
        raise OSError("disk full")

    with pytest.raises(OSError):
        store.publish(boom)
    assert store.versions() == [] and list((tmp_path / "weights").iterdir()) == []


def test_chunks_reassemble_every_file_and_end_with_the_sha(tmp_path):
    store = Store(tmp_path)
    files = {"b.safetensors": bytes(range(256)) * 5, "a.json": b"{}", "empty.txt": b""}
    store.publish(write_files(files))
    version, it = store.chunks(0, chunk_bytes=100)
    chunks = list(it)
    assert version == 1
    got: dict[str, bytearray] = {}
    for c in chunks:
        buf = got.setdefault(c.path, bytearray())
        assert c.offset == len(buf) and c.file_size == len(files[c.path])
        buf.extend(c.data)
    assert {k: bytes(v) for k, v in got.items()} == files
    assert chunks[0].path == "a.json"  # checksum order (sorted paths)
    assert chunks[-1].sha256 == store.version_sha(1) and all(not c.sha256 for c in chunks[:-1])
    assert max(len(c.data) for c in chunks) == 100


def test_chunk_arguments_are_checked_at_once(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(NotFound):
        store.chunks(0)
    store.publish(write_files({"a": b"1"}))
    with pytest.raises(NotFound, match="version 7"):
        store.chunks(7)
    with pytest.raises(InvalidArgument) as err:
        store.chunks(1, chunk_bytes=65 * 1024 * 1024)
    assert err.value.field == "chunk_bytes"


@pytest.mark.parametrize("tag", ["", ".hidden", "../up", "a/b", "x" * 200, "sp ace"])
def test_bad_tags_are_refused(tag):
    with pytest.raises(InvalidArgument) as err:
        check_tag(tag)
    assert err.value.field == "tag"


def test_commit_checkpoint_replaces_and_marks_latest(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(NotFound):
        store.resolve_checkpoint("latest")
    for content in (b"old", b"new"):
        tmp = store.checkpoints / store.temp_tag("step-3")
        tmp.mkdir()
        (tmp / "state").write_bytes(content)
        store.commit_checkpoint("step-3")
    assert (store.checkpoint_dir("step-3") / "state").read_bytes() == b"new"
    assert store.resolve_checkpoint("latest") == "step-3"
    assert sorted(p.name for p in store.checkpoints.iterdir()) == ["latest", "step-3"]
    with pytest.raises(NotFound):
        store.resolve_checkpoint("step-4")


def test_journal_survives_restarts_and_can_be_rolled_back(tmp_path):
    store = Store(tmp_path)
    for i in range(4):
        store.append_journal(f"s{i}", {"global_step": i + 1, "metrics": {"loss": float(i)}})
    again = Store(tmp_path).read_journal(keep=100)
    assert list(again) == ["s0", "s1", "s2", "s3"] and again["s2"] == {"global_step": 3, "metrics": {"loss": 2.0}}
    assert list(store.read_journal(keep=2)) == ["s2", "s3"]
    store.rewrite_journal(OrderedDict(list(again.items())[:2]))
    assert list(Store(tmp_path).read_journal(keep=100)) == ["s0", "s1"]


def test_a_journal_mark_reads_back_the_applied_set_of_its_moment_even_after_a_rewrite(tmp_path):
    store = Store(tmp_path)
    record = lambda i: {"global_step": i + 1, "metrics": {"loss": float(i)}}  # noqa: E731
    for i in range(3):
        store.append_journal(f"s{i}", record(i))
    three = store.journal_mark()
    for i in range(3, 5):
        store.append_journal(f"s{i}", record(i))
    assert three["entries"] == 3 and store.journal_mark() == {"journal": three["journal"], "entries": 5}
    assert list(Store(tmp_path).journal_at(three, keep=100)) == ["s0", "s1", "s2"]
    assert list(store.journal_at(three, keep=2)) == ["s1", "s2"]

    store.rewrite_journal(store.journal_at(three, keep=100))  # a rollback to `three`
    store.append_journal("t3", record(3))
    again = Store(tmp_path)
    assert again.journal_mark()["journal"] != three["journal"] and again.journal_mark()["entries"] == 4
    assert list(again.read_journal(keep=100)) == ["s0", "s1", "s2", "t3"]
    assert list(again.journal_at(three, keep=100)) == ["s0", "s1", "s2"]  # from journals/, kept by the rewrite
    assert (tmp_path / "journals" / f"{three['journal']}.jsonl").is_file()
    with pytest.raises(NotFound):
        again.journal_at({"journal": "gone", "entries": 1}, keep=100)
    with pytest.raises(NotFound):
        again.journal_at({"journal": three["journal"], "entries": 9}, keep=100)


def test_a_journal_written_before_headers_gets_one_and_keeps_its_entries(tmp_path):
    lines = [json.dumps({"step_id": f"s{i}", "global_step": i + 1, "metrics": {}}) for i in range(2)]
    (tmp_path / "journal.jsonl").write_text("".join(line + "\n" for line in lines))
    store = Store(tmp_path)
    mark = store.journal_mark()
    assert mark["entries"] == 2 and json.loads((tmp_path / "journal.jsonl").read_text().splitlines()[0]) == {
        "journal": mark["journal"]}
    store.append_journal("s2", {"global_step": 3, "metrics": {}})
    assert list(Store(tmp_path).read_journal(keep=100)) == ["s0", "s1", "s2"]
    assert list(Store(tmp_path).journal_at(mark, keep=100)) == ["s0", "s1"]


def test_chunks_resume_at_a_file_and_offset_skipping_what_came_before(tmp_path):
    store = Store(tmp_path)
    files = {"b.safetensors": bytes(range(256)) * 5, "a.json": b"{}", "c.txt": b"tail"}
    store.publish(write_files(files))
    _, it = store.chunks(1, chunk_bytes=100, from_path="b.safetensors", from_offset=700)
    chunks = list(it)
    assert (chunks[0].path, chunks[0].offset) == ("b.safetensors", 700)
    assert b"".join(c.data for c in chunks if c.path == "b.safetensors") == files["b.safetensors"][700:]
    assert [c.path for c in chunks][-1] == "c.txt" and chunks[-1].sha256 == store.version_sha(1)
    with pytest.raises(InvalidArgument, match="from_path"):
        store.chunks(1, from_path="nope.bin")
    with pytest.raises(InvalidArgument, match="from_offset"):
        store.chunks(1, from_path="a.json", from_offset=3)
    with pytest.raises(InvalidArgument, match="needs from_path"):
        store.chunks(1, from_offset=3)
