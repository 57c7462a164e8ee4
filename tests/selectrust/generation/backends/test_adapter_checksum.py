"""The adapter-checksum protocol (selectrust/generation/backends/adapter_checksum.py): what the trainer writes into a synced
adapter directory and what the server's client reads back to name the adapter."""

from __future__ import annotations

import hashlib

import pytest

from selectrust.generation.backends.adapter_checksum import (CHECKSUM_FILE, adapter_checksum, checksum_or_none, read_checksum,
                                                  write_checksum)


def _adapter(tmp_path, weights: bytes = b"w1"):
    d = tmp_path / "adapter-s1"
    d.mkdir(exist_ok=True)
    (d / "adapter_model.safetensors").write_bytes(weights)
    (d / "adapter_config.json").write_text('{"r": 4}')
    return d


def test_the_checksum_is_the_documented_hash_of_the_other_files(tmp_path):
    d = _adapter(tmp_path)
    (d / "sub").mkdir()  # a subdirectory is not part of the adapter's files
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):  # sorted by name; name, NUL, bytes
        h.update(name.encode() + b"\0" + (d / name).read_bytes())
    assert adapter_checksum(d) == h.hexdigest()
    digest = write_checksum(d)
    assert digest == h.hexdigest() and (d / CHECKSUM_FILE).read_text() == digest + "\n"
    assert CHECKSUM_FILE == "CHECKSUM.sha256"  # the file name is part of the protocol: old adapters carry it
    # the checksum file itself is left out, so writing it changes nothing and re-writing gives the same
    assert adapter_checksum(d) == write_checksum(d) == read_checksum(d) == checksum_or_none(d) == digest


def test_new_weights_get_a_new_checksum(tmp_path):
    first = write_checksum(_adapter(tmp_path, b"w1"))
    assert write_checksum(_adapter(tmp_path, b"w2")) != first


def test_reading_a_checksum_that_is_not_there(tmp_path):
    d = _adapter(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_checksum(d)  # the trainer's non-main ranks: the main rank must have written it
    assert checksum_or_none(d) is None  # the client: the adapter is named with a per-client nonce instead
    (d / CHECKSUM_FILE).write_text("\n")
    assert read_checksum(d) == "" and checksum_or_none(d) is None
