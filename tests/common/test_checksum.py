"""Weight checksums: stable, order-independent of creation, sensitive to every byte and name."""

import pytest

from services.common.checksum import sha256_dir, verify_dir, weight_files
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
