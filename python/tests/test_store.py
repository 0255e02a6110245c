import os
import threading

import pytest

import gvault


def test_put_get_delete_scan(tmp_path):
    with gvault.Store(str(tmp_path / "db")) as s:
        assert s.get(b"missing") is None
        for i in range(100):
            s.put(b"k%03d" % i, b"v%d" % i)
        assert s.get(b"k007") == b"v7"
        s.delete(b"k007")
        assert s.get(b"k007") is None
        got = list(s.scan(b"k010", b"k013"))
        assert got == [(b"k010", b"v10"), (b"k011", b"v11"), (b"k012", b"v12")]
        rev = [k for k, _ in s.scan(b"k010", b"k013", reverse=True)]
        assert rev == [b"k012", b"k011", b"k010"]
        assert len(list(s.scan())) == 99


def test_batch_is_atomic_and_snapshot_is_stable(tmp_path):
    with gvault.Store(str(tmp_path / "db")) as s:
        s.put(b"a", b"1")
        snap = s.snapshot()
        s.batch([(b"a", b"2"), (b"b", bytearray(b"3")), (b"c", None)])
        assert s.get(b"a") == b"2" and s.get(b"b") == b"3"
        assert s.get(b"a", snapshot=snap) == b"1"
        assert s.get(b"b", snapshot=snap) is None
        assert list(s.scan(snapshot=snap)) == [(b"a", b"1")]
        del snap


def test_reopen_keeps_data_and_close_is_final(tmp_path):
    p = str(tmp_path / "db")
    s = gvault.Store(p)
    s.put(b"k", b"v" * 10000, sync=True)
    s.close()
    s.close()  # idempotent
    with pytest.raises(gvault.Closed):
        s.get(b"k")
    with gvault.Store(p) as s2:
        assert s2.get(b"k") == b"v" * 10000


def test_str_is_refused(tmp_path):
    with gvault.Store(str(tmp_path / "db")) as s:
        with pytest.raises(gvault.InvalidArgument):
            s.put("text", b"v")
        with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
            s.get("text")


def test_encrypted_store_needs_its_key(tmp_path):
    p = str(tmp_path / "db")
    with gvault.Store(p, encrypt=True) as s:
        assert s.encrypted
        s.put(b"secret", b"value")
        s.flush()
    assert os.path.exists(p + ".key")
    # Found beside the store.
    with gvault.Store(p) as s:
        assert s.get(b"secret") == b"value"
    # Another key: refused before anything is read.
    other = tmp_path / "other.key"
    other.write_text("11" * 32 + "\n")
    os.chmod(other, 0o600)
    with pytest.raises(gvault.KeyError):
        gvault.Store(p, key_file=str(other))
    # No key at all.
    os.rename(p + ".key", str(tmp_path / "moved.key"))
    with pytest.raises(gvault.KeyError):
        gvault.Store(p)
    with pytest.raises(gvault.KeyError):
        gvault.Store(p, key_file=str(tmp_path / "absent.key"))
    with gvault.Store(p, key_file=str(tmp_path / "moved.key")) as s:
        assert s.get(b"secret") == b"value"


def test_error_mapping(tmp_path):
    with pytest.raises(gvault.NotFound):
        gvault.Store(str(tmp_path / "nothing"), create=False)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "CURRENT").write_text("garbage\n")
    with pytest.raises(gvault.GvaultError) as e:
        gvault.Store(str(junk))
    assert isinstance(e.value, (gvault.NotAStore, gvault.Corruption))
    p = str(tmp_path / "db")
    gvault.Store(p).close()
    with gvault.Store(p, read_only=True) as s:
        with pytest.raises(gvault.ReadOnly):
            s.put(b"k", b"v")


def test_damaged_table_is_corruption(tmp_path):
    p = tmp_path / "db"
    with gvault.Store(str(p)) as s:
        for i in range(2000):
            s.put(b"key%05d" % i, b"x" * 100)
        s.flush()
    tables = [f for f in os.listdir(p) if f.endswith(".sst") or f.endswith(".ldb") or f.endswith(".tbl")]
    assert tables, os.listdir(p)
    from conftest import flip_byte

    flip_byte(p / tables[0], 100)
    with pytest.raises(gvault.Corruption):
        with gvault.Store(str(p)) as s:
            for i in range(2000):
                s.get(b"key%05d" % i)


def test_threads_share_a_store(tmp_path):
    with gvault.Store(str(tmp_path / "db")) as s:
        def work(t):
            for i in range(200):
                s.put(b"%d-%d" % (t, i), b"v")
        ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(list(s.scan())) == 800
