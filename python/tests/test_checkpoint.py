import collections
import json
import os
import threading

import numpy as np
import pytest

import gvault
from gvault import checkpoint as ck
from conftest import flip_byte, packs

DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def rng_array(rng, dtype, shape):
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    a = raw.view(dtype).reshape(shape)
    return a.astype(bool) if dtype == "bool" else a


def assert_same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()  # bit for bit (NaN payloads too)


def test_all_numpy_dtypes_round_trip(repo):
    rng = np.random.default_rng(1)
    state = {d: rng_array(rng, d, (7, 33)) for d in DTYPES}
    state["big"] = rng_array(rng, "float32", (600, 700))  # its own segment, several chunks
    state["empty"] = np.zeros((0, 5), dtype=np.float32)
    state["scalar0d"] = np.array(3.5, dtype=np.float64)
    ck.save(repo, "dt", state)
    out = ck.load(repo, "dt")
    assert sorted(out) == sorted(state)
    for k in state:
        assert_same(state[k], out[k])


def test_ml_dtypes_bf16_and_float8(repo):
    ml = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(2)
    state = {
        "bf16": rng.standard_normal((300, 300)).astype(ml.bfloat16),
        "e4m3": rng.standard_normal(1000).astype(ml.float8_e4m3fn),
        "e5m2": rng.standard_normal(10).astype(ml.float8_e5m2),
    }
    ck.save(repo, "ml", state)
    out = ck.load(repo, "ml")
    for k in state:
        assert_same(state[k], out[k])
    man = manifest(repo, "ml")
    assert {t["dtype"] for t in man["tensors"]} == {"bfloat16", "float8_e4m3fn", "float8_e5m2"}


def test_bf16_without_ml_dtypes_comes_back_as_raw_bits(repo, monkeypatch):
    ml = pytest.importorskip("ml_dtypes")
    a = np.arange(50, dtype=np.float32).astype(ml.bfloat16)
    ck.save(repo, "raw", {"a": a})
    monkeypatch.setattr(ck, "_ml_dtypes", lambda: None)
    with pytest.warns(UserWarning, match="ml_dtypes"):
        out = ck.load(repo, "raw")
    monkeypatch.undo()
    assert out["a"].dtype == np.uint16
    assert out["a"].tobytes() == a.tobytes()


def test_non_contiguous_views_are_saved_as_their_contents(repo):
    base = np.arange(200 * 300, dtype=np.float64).reshape(200, 300)
    state = {"t": base.T, "step": base[::3, 1::7], "neg": base[::-1, ::-2], "col": base[:, 5]}
    ck.save(repo, "views", state)
    out = ck.load(repo, "views")
    for k, v in state.items():
        assert out[k].flags.c_contiguous
        assert np.array_equal(out[k], v)
    man = manifest(repo, "views")
    t = {x["name"]: x for x in man["tensors"]}
    assert t["t"]["source_strides"] == [1, 300]
    assert t["t"]["strides"] == [200, 1]
    assert t["neg"]["source_strides"] == [-300, -2]


def test_tree_and_metadata_round_trip(repo):
    state = collections.OrderedDict(
        model={"layer.0.w": np.ones((4, 4), np.float32), "layer.0.b": np.zeros(4, np.float32)},
        optim={"state": {0: {"exp_avg": np.full(3, 2.0)}, 1: {}}, "param_groups": [{"lr": 1e-3, "ids": [0, 1]}]},
        step=1234, tag="run-7", ok=True, none=None, blob=b"\x00\x01", pair=(1, "x"),
        scalar=np.float32(2.5),
    )
    ck.save(repo, "tree", state)
    out = ck.load(repo, "tree")
    assert isinstance(out, collections.OrderedDict) and list(out) == list(state)
    assert out["optim"]["state"][0]["exp_avg"].tolist() == [2.0, 2.0, 2.0]
    assert out["optim"]["param_groups"] == [{"lr": 1e-3, "ids": [0, 1]}]
    assert (out["step"], out["tag"], out["ok"], out["none"], out["blob"], out["pair"]) == \
        (1234, "run-7", True, None, b"\x00\x01", (1, "x"))
    assert out["scalar"] == np.float32(2.5) and isinstance(out["scalar"], np.float32)
    with pytest.raises(gvault.InvalidArgument):
        ck.save(repo, "bad", {"x": object()})
    with pytest.raises(gvault.InvalidArgument):
        ck.save(repo, "bad", {(1, 2): 3})
    with pytest.raises(gvault.InvalidArgument):
        ck.save(repo, "a/b", {})


def model(rng, n=20, size=(256, 1024)):
    return {f"layer{i}.weight": rng.standard_normal(size).astype(np.float32) for i in range(n)}


def test_second_save_adds_only_the_changed_tensor(repo):
    rng = np.random.default_rng(3)
    state = model(rng)
    total = sum(v.nbytes for v in state.values())
    first = ck.save(repo, "m", state)
    assert first["bytes_new"] >= total
    state["layer7.weight"] = state["layer7.weight"].copy()
    state["layer7.weight"][100:110] += 1
    second = ck.save(repo, "m", state)
    one = state["layer7.weight"].nbytes
    # Only chunks of the changed tensor are new (tensor-aligned chunking).
    assert 0 < second["bytes_new"] <= one
    assert second["bytes_added"] < one + 64 * 1024
    assert second["chunks_known"] > 0
    out = ck.load(repo, "m")
    for k in state:
        assert np.array_equal(out[k], state[k])
    old = ck.load(repo, "m", snapshot=first["snapshot"])
    assert not np.array_equal(old["layer7.weight"], state["layer7.weight"])


def test_chunks_never_span_two_large_tensors(repo):
    rng = np.random.default_rng(4)
    a = {"x": rng_array(rng, "uint8", (300_000,)), "y": rng_array(rng, "uint8", (300_000,))}
    ck.save(repo, "a", a)
    # y alone, saved under another name: every one of its chunks is known.
    s = ck.save(repo, "b", {"y": a["y"]})
    assert s["bytes_new"] < 1000  # the manifest only


def test_damage_is_detected_on_load(tmp_path):
    p = str(tmp_path / "repo")
    repo = gvault.Repository.init(p)
    rng = np.random.default_rng(5)
    state = {"w": rng.standard_normal((512, 512)).astype(np.float32)}
    ck.save(repo, "d", state)
    big = max(packs(p), key=os.path.getsize)
    flip_byte(big, 1000)
    with pytest.raises(gvault.Corruption):
        ck.load(repo, "d")


def test_wrong_key_is_refused(tmp_path):
    p = str(tmp_path / "repo")
    repo = gvault.Repository.init(p)
    ck.save(repo, "k", {"w": np.ones(10)})
    wrong = tmp_path / "wrong.key"
    wrong.write_text("33" * 32 + "\n")
    os.chmod(wrong, 0o600)
    with pytest.raises(gvault.KeyError):
        gvault.Repository(p, key_file=str(wrong))


def test_missing_checkpoint(repo):
    with pytest.raises(gvault.NotFound):
        ck.load(repo, "never-saved")


def test_concurrent_saves(tmp_path):
    p = str(tmp_path / "repo")
    gvault.Repository.init(p)
    rng = np.random.default_rng(6)
    shared = rng.standard_normal((256, 1024)).astype(np.float32)
    states = [{"shared": shared, "own": rng.standard_normal((128, 1024)).astype(np.float32), "i": i}
              for i in range(4)]
    errors = []
    # Two handles (as two processes would have) and two threads on each.
    handles = [gvault.Repository(p), gvault.Repository(p)]

    def work(i):
        try:
            ck.save(handles[i % 2], f"c{i}", states[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    fresh = gvault.Repository(p)
    for i in range(4):
        out = ck.load(fresh, f"c{i}")
        assert np.array_equal(out["own"], states[i]["own"]) and out["i"] == i
        assert np.array_equal(out["shared"], shared)
    assert fresh.check(read_data=True)["errors"] == []


def test_safetensors_export_import(repo, tmp_path):
    ml = pytest.importorskip("ml_dtypes")
    state = {"a": np.arange(12, dtype=np.int32).reshape(3, 4), "meta": {"step": 3},
             "b": np.ones(5, dtype=ml.bfloat16)}
    ck.save(repo, "st", state)
    f = str(tmp_path / "x.safetensors")
    ck.export_safetensors(repo, "st", f)
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    assert header["a"] == {"dtype": "I32", "shape": [3, 4], "data_offsets": header["a"]["data_offsets"]}
    assert header["b"]["dtype"] == "BF16"
    try:
        from safetensors.numpy import load_file
    except ImportError:
        load_file = None
    if load_file is not None:
        assert np.array_equal(load_file(f)["a"], state["a"])
    back = ck.read_safetensors(f)
    assert back["meta"] == {"step": 3} and np.array_equal(back["a"], state["a"])
    ck.import_safetensors(repo, "st2", f)
    out = ck.load(repo, "st2")
    assert_same(out["b"], state["b"])


def test_fixed_chunker_repository(tmp_path):
    repo = gvault.Repository.init(str(tmp_path / "repo"), chunker="fixed", block_size=65536)
    rng = np.random.default_rng(7)
    state = model(rng, n=3, size=(100, 1000))
    ck.save(repo, "f", state)
    out = ck.load(repo, "f")
    for k in state:
        assert np.array_equal(out[k], state[k])


def test_cpu_torch_round_trip(repo):
    torch = pytest.importorskip("torch")
    base = torch.randn(64, 80)
    state = {"bf16": torch.randn(300, 300).to(torch.bfloat16), "view": base.t()[::2],
             "i64": torch.arange(10), "half": torch.randn(5).half(), "np": np.ones(3)}
    ck.save(repo, "pt", state)
    out = ck.load(repo, "pt")
    for k in ("bf16", "view", "i64", "half"):
        assert isinstance(out[k], torch.Tensor) and out[k].dtype == state[k].dtype
        assert torch.equal(out[k], state[k].contiguous())
    assert isinstance(out["np"], np.ndarray)


def manifest(repo, name):
    return json.loads(repo._reader(name).manifest())


def test_packs_are_reproducible_from_their_id(repo):
    # The GPU test's premise: a pack is a function of its id and chunks, so
    # re-sealing on the host under the same id gives the stored bytes.
    rng = np.random.default_rng(8)
    ck.save(repo, "r", model(rng, n=3))
    names = repo._packs()
    assert len(names) >= 2
    for n in names:
        stored, again = repo._reseal_pack(n)
        assert stored == again
        assert all(flags == 0 for _, _, flags in repo._pack_entries(n))


def test_segments_follow_tensor_boundaries():
    class L:
        def __init__(self, n):
            self.nbytes = n
    leaves = [L(10), L(7), L(ck.TINY), L(3), L(ck.TINY_GROUP - 8), L(100)]
    segs, lens = ck._segments(leaves)
    assert segs == [[0, 1], [2], [3], [4], [5]]
    assert [leaf.offset for leaf in leaves][:2] == [0, 16]
    for s, n in zip(segs, lens):
        assert n == leaves[s[-1]].offset + leaves[s[-1]].nbytes <= max(ck.TINY_GROUP, leaves[s[0]].nbytes)
    many = [L(60000) for _ in range(40)]
    segs, lens = ck._segments(many)
    assert [len(s) for s in segs] == [17, 17, 6] and max(lens) <= ck.TINY_GROUP


def test_manifest_is_checked_before_use(repo, monkeypatch):
    ck.save(repo, "m", {"a": np.arange(10, dtype=np.int64), "b": np.zeros(3)})
    good = repo._reader("m").manifest()

    class Fake:
        def __init__(self, real, manifest):
            self.real, self.m = real, manifest

        def manifest(self):
            return self.m

        def __getattr__(self, k):
            return getattr(self.real, k)

    def bad_with(change):
        man = json.loads(good)
        change(man)
        return json.dumps(man).encode()

    cases = [
        b"not json",
        bad_with(lambda m: m.update(format="other")),
        bad_with(lambda m: m.update(version=99)),
        bad_with(lambda m: m["tensors"][0].update(shape=[11])),
        bad_with(lambda m: m["tensors"][0].update(segment=7)),
        bad_with(lambda m: m["tensors"][0].update(offset=10 ** 9)),
        bad_with(lambda m: m.update(tree={"$d": [["a", {"$x": 5}]]})),
        bad_with(lambda m: m["tensors"][0].pop("dtype")),
    ]
    for manifest in cases:
        real = repo._reader

        class R:
            def __init__(self, inner):
                self.inner = inner

            def __getattr__(self, k):
                return getattr(self.inner, k)

            def _reader(self, name, snapshot=None):
                return Fake(real(name, snapshot), manifest)

            def refresh(self):
                pass

        with pytest.raises((gvault.Corruption, gvault.Unsupported)):
            ck.load(R(repo), "m")
    assert np.array_equal(ck.load(repo, "m")["a"], np.arange(10))
