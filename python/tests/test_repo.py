import os

import pytest

import gvault


def test_backup_restore_check(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"hello " * 1000)
    (src / "sub" / "b.bin").write_bytes(os.urandom(3 << 20))
    repo = gvault.Repository.init(str(tmp_path / "repo"))
    s1 = repo.backup([str(src)])
    assert s1["files_new"] == 2 and s1["bytes_total"] == 6000 + (3 << 20)
    s2 = repo.backup([str(src)])
    assert s2["files_unchanged"] == 2 and s2["chunks_new"] == 0 and s2["parent"] == s1["snapshot"]
    snaps = repo.snapshots()
    assert [s["id"] for s in snaps] == [s1["snapshot"], s2["snapshot"]]
    assert snaps[0]["paths"] == [str(src)]
    out = tmp_path / "out"
    r = repo.restore("latest", str(out))
    assert r["files"] == 2 and not r["failed"]
    restored = out / str(src).lstrip("/")
    assert (restored / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert repo.check(read_data=True)["errors"] == []
    # Reopened with the key file beside it.
    again = gvault.Repository(str(tmp_path / "repo"))
    assert len(again.snapshots()) == 2


def test_repository_errors(tmp_path):
    with pytest.raises(gvault.NotARepository):
        gvault.Repository(str(tmp_path / "none"))
    p = str(tmp_path / "repo")
    gvault.Repository.init(p)
    with pytest.raises(gvault.InvalidArgument):
        gvault.Repository.init(p)
    wrong = tmp_path / "wrong.key"
    wrong.write_text("22" * 32 + "\n")
    os.chmod(wrong, 0o600)
    with pytest.raises(gvault.KeyError):
        gvault.Repository(p, key_file=str(wrong))
    os.rename(p + ".key", str(tmp_path / "elsewhere.key"))
    with pytest.raises(gvault.KeyError):
        gvault.Repository(p)
    with pytest.raises(gvault.InvalidArgument):
        gvault.Repository.init(str(tmp_path / "r2"), chunker="fixed", block_size=100)
    with pytest.raises(gvault.NotFound):
        gvault.Repository(p, key_file=str(tmp_path / "elsewhere.key")).restore("ffff", str(tmp_path / "o"))


def test_check_reports_a_damaged_pack(tmp_path):
    from conftest import flip_byte, packs

    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(os.urandom(1 << 20))
    p = str(tmp_path / "repo")
    repo = gvault.Repository.init(p)
    repo.backup([str(src)])
    flip_byte(packs(p)[0], 10)
    rep = repo.check(read_data=True)
    assert rep["errors"], rep
