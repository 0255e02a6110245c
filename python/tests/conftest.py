import os

import pytest

import gvault


@pytest.fixture
def repo(tmp_path):
    return gvault.Repository.init(str(tmp_path / "repo"))


def flip_byte(path, offset):
    """Changes one byte of a file in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def packs(repo_dir):
    d = os.path.join(repo_dir, "data")
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.join(root, f) for f in files if not f.startswith(".tmp")]
    return sorted(out)
