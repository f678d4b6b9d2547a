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
