"""Weight checksums: stable, order-independent of creation, sensitive to every byte and name."""

import pytest

from services.common.checksum import DirDigest, read_verified, sha256_dir, verify_dir, weight_files
from services.common.errors import ChecksumMismatch


@pytest.fixture
def weights(tmp_path):
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_bytes(bytes(range(256)) * 10)
    (tmp_path / ".partial").write_text("ignored")
    return tmp_path


def test_checksum_is_stable_and_ignores_hidden_files(weights):
    first = sha256_dir(weights)
    (weights / ".partial").write_text("changed")
    assert sha256_dir(weights) == first
    assert [p.name for p in weight_files(weights)] == ["config.json", "model.safetensors"]


def test_a_flipped_byte_is_detected(weights):
    good = sha256_dir(weights)
    blob = bytearray((weights / "model.safetensors").read_bytes())
    blob[100] ^= 0x01
    (weights / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(ChecksumMismatch, match="expected"):
        verify_dir(weights, good)


def test_a_renamed_file_changes_the_checksum(weights):
    good = sha256_dir(weights)
    (weights / "config.json").rename(weights / "config2.json")
    assert sha256_dir(weights) != good


def test_verify_accepts_upper_case_hex(weights):
    assert verify_dir(weights, sha256_dir(weights).upper()) == sha256_dir(weights)


def test_read_verified_returns_the_hashed_bytes_of_the_kept_files(weights):
    kept = read_verified(weights, sha256_dir(weights), lambda rel: rel.endswith(".safetensors"))
    assert list(kept) == ["model.safetensors"]
    assert kept["model.safetensors"].tobytes() == (weights / "model.safetensors").read_bytes()
    assert kept["model.safetensors"].flags.writeable  # loaders view tensors in it without a copy


def test_read_verified_refuses_a_changed_file_and_returns_nothing(weights):
    good = sha256_dir(weights)
    (weights / "model.safetensors").write_bytes(b"\xff" + (weights / "model.safetensors").read_bytes()[1:])
    with pytest.raises(ChecksumMismatch):
        read_verified(weights, good, lambda rel: True)


def test_dir_digest_fed_in_memory_equals_sha256_dir(weights):
    digest = DirDigest()
    for path in weight_files(weights):
        data = path.read_bytes()
        digest.start_file(path.name, len(data))
        digest.update(data[:7])
        digest.update(data[7:])
    assert digest.hexdigest() == sha256_dir(weights)
    with pytest.raises(ValueError, match="sorted"):
        digest.start_file("a.json", 0)


def test_read_verified_reads_into_a_reused_buffer_of_the_same_size(weights):
    import numpy as np

    size = (weights / "model.safetensors").stat().st_size
    spare, small = np.zeros(size, dtype=np.uint8), np.zeros(3, dtype=np.uint8)
    kept = read_verified(weights, sha256_dir(weights), lambda rel: True, {"model.safetensors": spare, "config.json": small})
    assert kept["model.safetensors"] is spare and spare.tobytes() == (weights / "model.safetensors").read_bytes()
    assert kept["config.json"] is not small  # another size: a fresh buffer


def _by_hand(files: dict[str, bytes]) -> str:
    """The module docstring's definition, written out: one stream, BLOCK-byte leaves, sha256 of the leaf digests."""
    import hashlib

    from services.common.checksum import BLOCK

    stream = b"".join(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data for rel, data in sorted(files.items()))
    leaves = [hashlib.sha256(stream[i : i + BLOCK]).digest() for i in range(0, len(stream), BLOCK)]
    return hashlib.sha256(b"".join(leaves)).hexdigest()


@pytest.mark.parametrize("workers", [1, 3])
def test_the_checksum_is_the_block_tree_of_the_stream_whatever_the_pieces_and_workers(tmp_path, workers):
    import numpy as np

    from services.common.checksum import BLOCK

    rng = np.random.default_rng(0)
    files = {
        "a.json": b"{}",
        "model.safetensors": rng.integers(0, 256, 3 * BLOCK + 12345, dtype=np.uint8).tobytes(),
        "sub/z.bin": rng.integers(0, 256, BLOCK - 20, dtype=np.uint8).tobytes(),  # straddles a block edge
    }
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    expected = _by_hand(files)
    assert sha256_dir(tmp_path) == expected
    digest = DirDigest(workers=workers)
    for rel, data in sorted(files.items()):
        digest.start_file(rel, len(data))
        cut = [0, 1, BLOCK - 3, BLOCK, 2 * BLOCK + 7, len(data)]  # pieces smaller, equal and larger than a block
        for lo, hi in zip(cut, cut[1:], strict=False):
            digest.update(memoryview(data)[lo:max(lo, hi)])
    assert digest.hexdigest() == expected
    kept = read_verified(tmp_path, expected, lambda rel: rel.endswith(".safetensors"))
    assert kept["model.safetensors"].tobytes() == files["model.safetensors"]


def test_an_empty_directory_has_the_checksum_of_no_leaves(tmp_path):
    import hashlib

    assert sha256_dir(tmp_path) == hashlib.sha256(b"").hexdigest()
