"""The GPU-resident checkpoint path, on a machine with CUDA and torch.

Skipped where torch or CUDA is missing. Runs under pytest, or without it
(the GPU machine may have no pytest): `python3 python/tests/test_gpu.py`.
"""

import os
import shutil
import sys
import tempfile

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

try:
    import pytest
except ImportError:  # pragma: no cover
    pytest = None

import gvault
from gvault import checkpoint as ck

HAVE_CUDA = torch is not None and torch.cuda.is_available()
if pytest is not None:
    pytestmark = pytest.mark.skipif(not HAVE_CUDA, reason="needs torch with CUDA")


def bits(t):
    """The tensor's bytes as a flat uint8 tensor on the CPU (bit for bit)."""
    return t.contiguous().reshape(-1).view(torch.uint8).cpu()


def same_bits(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(bits(a), bits(b))


def make_state(seed=0, layers=12):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda:0"
    state = {}
    for i in range(layers):
        state[f"layers.{i}.attn.weight"] = torch.randn(1024, 1024, generator=g, device=dev).to(torch.bfloat16)
        state[f"layers.{i}.mlp.weight"] = torch.randn(1024, 2048, generator=g, device=dev).to(torch.bfloat16)
        state[f"layers.{i}.norm.weight"] = torch.randn(1024, generator=g, device=dev)  # tiny: shared segment
    base = torch.randn(512, 768, generator=g, device=dev)
    state["view.t"] = base.t()  # non-contiguous
    state["view.strided"] = base[::2, 1::3]
    state["ints"] = torch.randint(-100, 100, (3000,), generator=g, device=dev, dtype=torch.int64)
    state["nan"] = torch.tensor([float("nan"), -0.0, float("inf")], device=dev)
    state["step"] = 17
    return state


def fresh_repo(d, name="repo"):
    return gvault.Repository.init(os.path.join(d, name), accel="auto")


def check_round_trip(out, state):
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            assert isinstance(out[k], torch.Tensor), k
            assert out[k].device == v.device, (k, out[k].device)
            assert same_bits(out[k], v), k
        else:
            assert out[k] == v


def test_device_round_trip_bit_for_bit(tmp_path):
    repo = fresh_repo(str(tmp_path))
    state = make_state()
    s = ck.save(repo, "gpu", state)
    assert s["packs_sealed_on_device"] > 0, s
    check_round_trip(ck.load(repo, "gpu", device="cuda:0"), state)
    check_round_trip(ck.load(repo, "gpu"), state)  # back where it was
    host = ck.load(repo, "gpu", device="cpu")
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            assert host[k].device.type == "cpu" and same_bits(host[k], v), k
    # The CPU path reads what the GPU path wrote, and the other way round.
    check_round_trip(ck.load(repo, "gpu", device="cuda:0", path="cpu"), state)
    ck.save(repo, "cpu", state, path="cpu")
    check_round_trip(ck.load(repo, "cpu", device="cuda:0"), state)
    assert repo.check(read_data=True)["errors"] == []


def test_only_new_chunks_cross_the_link(tmp_path):
    repo = fresh_repo(str(tmp_path))
    state = make_state(1)
    ck.reset_link_stats()
    first = ck.save(repo, "m", state)
    l1 = ck.link_stats()
    assert l1["h2d_bytes"] == 0
    # What crossed is the new chunks' ciphertext (16-byte aligned), no more.
    assert 0 < l1["d2h_bytes"] <= first["bytes_new"] + 16 * first["chunks_new"]
    # Unchanged: nothing crosses.
    ck.reset_link_stats()
    again = ck.save(repo, "m", state)
    assert ck.link_stats()["d2h_bytes"] == 0 and again["bytes_new"] < 4096, again
    # 5% of the tensors changed: only their new chunks cross.
    names = [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.numel() >= 1 << 20]
    changed = names[:: 20][: max(1, len(names) // 20)]
    changed_bytes = 0
    for k in changed:
        state[k] = state[k].clone()
        state[k][7] += 1
        changed_bytes += state[k].numel() * state[k].element_size()
    ck.reset_link_stats()
    second = ck.save(repo, "m", state)
    l2 = ck.link_stats()
    assert l2["h2d_bytes"] == 0
    assert 0 < l2["d2h_bytes"] <= second["bytes_new"] + 16 * second["chunks_new"]
    assert second["bytes_new"] <= changed_bytes + 4096, (second, changed_bytes)
    check_round_trip(ck.load(repo, "m", device="cuda:0"), state)
    # Loading moves ciphertext only: about the checkpoint's bytes, once.
    ck.reset_link_stats()
    ck.load(repo, "m", device="cuda:0")
    l3 = ck.link_stats()
    tensor_bytes = sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
    assert l3["d2h_bytes"] == 0 and tensor_bytes <= l3["h2d_bytes"] <= tensor_bytes * 1.01 + (1 << 20)


def test_gpu_and_cpu_paths_write_identical_packs(tmp_path):
    d = str(tmp_path)
    a = fresh_repo(d, "a")
    # Same config and keys: a copy of the empty repository (and its key).
    shutil.copytree(os.path.join(d, "a"), os.path.join(d, "b"))
    shutil.copy(os.path.join(d, "a.key"), os.path.join(d, "b.key"))
    b = gvault.Repository(os.path.join(d, "b"), accel="auto")
    state = make_state(2)
    sa = ck.save(a, "x", state)
    sb = ck.save(b, "x", state, path="cpu")
    assert sa["packs_sealed_on_device"] > 0 and sb["packs_sealed_on_device"] == 0
    # The same chunks in the same packs, in the same order...
    pa = sorted(a._pack_entries(n) for n in a._packs())
    pb = sorted(b._pack_entries(n) for n in b._packs())
    assert pa == pb
    # ... the same manifest and chunk lists ...
    ra, rb = a._reader("x"), b._reader("x")
    assert ra.manifest() == rb.manifest() and ra.chunk_ids() == rb.chunk_ids()
    # ... and every GPU-sealed pack is, byte for byte, what the CPU seals
    # under the same pack id (pack ids are random per pack by design).
    for n in a._packs():
        stored, on_cpu = a._reseal_pack(n)
        assert stored == on_cpu, n


class Skipped(Exception):
    pass


#: True when run as a script (`_main`): skips are this file's own, not
#: pytest's (whose Skipped is no Exception), even where pytest is installed.
_STANDALONE = False


def _skip(why):
    if pytest is not None and not _STANDALONE:
        pytest.skip(why)
    raise Skipped(why)


def test_two_gpus_each_seal_and_load_their_own(tmp_path):
    """Tensors on two GPUs: each GPU chunks and seals its own (packs hold
    one GPU's chunks), the chunks equal the CPU path's and one GPU's, and
    every tensor loads back to its GPU bit for bit."""
    if torch.cuda.device_count() < 2:
        _skip("needs two GPUs")
    d = str(tmp_path)
    a = fresh_repo(d, "a")
    shutil.copytree(os.path.join(d, "a"), os.path.join(d, "b"))
    shutil.copy(os.path.join(d, "a.key"), os.path.join(d, "b.key"))
    b = gvault.Repository(os.path.join(d, "b"), accel="auto")
    base = make_state(3, layers=16)
    state = {k: v.to(f"cuda:{i % 2}") if isinstance(v, torch.Tensor) else v
             for i, (k, v) in enumerate(base.items())}
    assert {v.device.index for v in state.values() if isinstance(v, torch.Tensor)} == {0, 1}
    sa = ck.save(a, "x", state)
    assert sa["packs_sealed_on_device"] >= 2, sa
    check_round_trip(ck.load(a, "x"), state)
    on1 = ck.load(a, "x", device="cuda:1")
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            assert on1[k].device == torch.device("cuda:1") and same_bits(on1[k], v), k
    # The same manifest, chunks and chunk set as the CPU path.
    sb = ck.save(b, "x", state, path="cpu")
    assert sb["packs_sealed_on_device"] == 0
    ra, rb = a._reader("x"), b._reader("x")
    assert ra.manifest() == rb.manifest() and ra.chunk_ids() == rb.chunk_ids()
    chunks_a = sorted(e for n in a._packs() for e in a._pack_entries(n))
    chunks_b = sorted(e for n in b._packs() for e in b._pack_entries(n))
    assert chunks_a == chunks_b
    for n in a._packs():
        stored, on_cpu = a._reseal_pack(n)
        assert stored == on_cpu, n
    # One GPU: the same tensor chunks, so nothing new but the manifest.
    one = {k: v.to("cuda:0") if isinstance(v, torch.Tensor) else v for k, v in state.items()}
    s1 = ck.save(a, "one", one)
    assert a._reader("one").chunk_ids()[1:] == ra.chunk_ids()[1:]
    assert s1["bytes_new"] < 64 * 1024, s1
    check_round_trip(ck.load(a, "one"), one)
    assert a.check(read_data=True)["errors"] == []


def _main():  # pragma: no cover - the GPU machine without pytest
    global _STANDALONE
    _STANDALONE = True
    if not HAVE_CUDA:
        print("skipped: needs torch with CUDA")
        return 0
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            d = tempfile.mkdtemp()
            try:
                import pathlib
                import time

                print(f"RUN  {name}")
                t = time.perf_counter()
                fn(pathlib.Path(d))
                print(f"PASS {name} ({time.perf_counter() - t:.1f} s)")
            except Skipped as why:
                print(f"SKIP {name}: {why}")
            except Exception:
                import traceback

                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()
            finally:
                shutil.rmtree(d, ignore_errors=True)
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
