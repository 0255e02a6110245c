"""Checkpoint benchmark: a synthetic bf16 state dict (shapes of a
decoder-only transformer's), saved, saved again with 5% of its tensors
changed, and loaded, through gvault's GPU-resident path and its CPU path,
against torch.save / torch.load and safetensors (when installed) in the
same run, to the same directory. Prints one JSON object.

    python3 python/bench/checkpoint.py --gib 20 --dir /mnt/nvme/bench
    python3 python/bench/checkpoint.py --gib 1 --device cpu      # no GPU
    python3 python/bench/checkpoint.py --gib 16 --gpus 1,2       # per GPU count

Each figure is GB/s of checkpoint (tensor bytes / wall seconds), with
what bounds it: a first save and a load move every byte over the
host-device link (bound: the link, measured here with a pinned copy); a
second save moves only the changed chunks (bound: one pass of the fused
chunk + id job over device memory). Every save also writes the new packs
to the repository: its directory's write rate (16 MiB files written and
fsynced, as packs are, by 1 to 16 threads) is measured in the same run.

With --gpus, the GPU path runs once per GPU count N: layer i's tensors on
GPU i mod N (as a model split across GPUs), saved from and loaded back to
their GPUs; the CPU path and the baselines run once, on one GPU.
"""

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

import torch

import gvault
from gvault import checkpoint as ck


def synthetic_state(gib, device, seed=0):
    """Layers of a model with hidden 4096 and MLP 11008 (as a 7B model's),
    as many as make `gib` GiB of bf16, plus embeddings and norms."""
    hidden, mlp, vocab = 4096, 11008, 32000
    per_layer = 4 * hidden * hidden + 3 * hidden * mlp + 2 * hidden
    total = int(gib * (1 << 30)) // 2
    layers = max(1, (total - 2 * vocab * hidden) // per_layer)
    g = torch.Generator(device=device).manual_seed(seed)
    state = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g, device=device, dtype=torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            state[p + "self_attn." + n + ".weight"] = torch.randn(hidden, hidden, generator=g, device=device, dtype=torch.bfloat16)
        state[p + "mlp.gate_proj.weight"] = torch.randn(mlp, hidden, generator=g, device=device, dtype=torch.bfloat16)
        state[p + "mlp.up_proj.weight"] = torch.randn(mlp, hidden, generator=g, device=device, dtype=torch.bfloat16)
        state[p + "mlp.down_proj.weight"] = torch.randn(hidden, mlp, generator=g, device=device, dtype=torch.bfloat16)
        state[p + "input_layernorm.weight"] = torch.ones(hidden, device=device, dtype=torch.bfloat16)
        state[p + "post_attention_layernorm.weight"] = torch.ones(hidden, device=device, dtype=torch.bfloat16)
    state["lm_head.weight"] = torch.randn(vocab, hidden, generator=g, device=device, dtype=torch.bfloat16)
    return state


def nbytes(state):
    return sum(v.numel() * v.element_size() for v in state.values())


def sync():
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)


def timed(fn):
    sync()
    t = time.perf_counter()
    r = fn()
    sync()
    return time.perf_counter() - t, r


def change(state, fraction, seed=1):
    names = sorted(state)
    step = max(1, round(1 / fraction))
    out = dict(state)
    changed = 0
    for n in names[::step]:
        out[n] = state[n].clone()
        out[n].view(-1)[:: 4096] += 1
        changed += nbytes({n: out[n]})
    return out, changed


def spread(state, n):
    """The state with layer i's tensors on GPU i mod n (the rest on GPU 0)."""
    if n <= 1:
        return state
    out = {}
    for k, v in state.items():
        parts = k.split(".")
        layer = int(parts[2]) if len(parts) > 2 and parts[1] == "layers" else 0
        out[k] = v.to(f"cuda:{layer % n}")
    return out


def write_gbps(directory, threads=1, total=1 << 30, piece=16 << 20):
    """Write rate of `directory`: `threads` writers, each writing files of
    one `piece` (fsynced, as packs are) until `total` bytes are written."""
    buf = os.urandom(piece)
    count = max(1, total // piece)

    def writer(k):
        for i in range(k, count, threads):
            f = os.path.join(directory, f"write-rate-{i}.tmp")
            with open(f, "wb") as h:
                h.write(buf)
                h.flush()
                os.fsync(h.fileno())
    t = time.perf_counter()
    ts = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    dt = time.perf_counter() - t
    for i in range(count):
        os.remove(os.path.join(directory, f"write-rate-{i}.tmp"))
    return round(count * piece / dt / 1e9, 3)


def link_gbps(device):
    if not str(device).startswith("cuda"):
        return None
    x = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    h = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    h.copy_(x)
    t, _ = timed(lambda: h.copy_(x))
    return (1 << 30) / t / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=20)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--skip", default="", help="comma list of: gvault-cpu,torch,safetensors")
    ap.add_argument("--out", default=None, help="also write the JSON to this file")
    ap.add_argument("--gpus", default="1", help="comma list of GPU counts for the GPU path")
    ap.add_argument("--workers", default="auto",
                    help="comma list of worker threads a GPU for the GPU path (auto: the package's choice)")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    base = a.dir or tempfile.mkdtemp(prefix="gvault-bench-")
    os.makedirs(base, exist_ok=True)
    state = synthetic_state(a.gib, a.device)
    size = nbytes(state)
    state2, changed = change(state, 0.05)
    # Memory the repository's files will take, touched once before any
    # run and any write-rate figure (in a VM, first-touched pages cost far
    # more than reused ones, which would favour whichever run comes later).
    warm = write_gbps(base, 16, 2 * size)
    res = {"device": a.device, "gpu": torch.cuda.get_device_name() if a.device.startswith("cuda") else None,
           "checkpoint_bytes": size, "tensors": len(state), "changed_bytes": changed,
           "link_d2h_gbps": link_gbps(a.device), "warm_write_gbps": warm, "repo_write_gbps": write_gbps(base),
           "repo_write_gbps_parallel": {n: write_gbps(base, n, 4 << 30) for n in (4, 8, 16)}, "runs": {}}
    counts = [int(n) for n in a.gpus.split(",") if n]
    if a.device.startswith("cuda"):
        res["gpus_visible"] = torch.cuda.device_count()
        counts = [n for n in counts if n <= torch.cuda.device_count()]

    def gb(t):
        return round(size / t / 1e9, 3)

    workers = [None if w == "auto" else int(w) for w in a.workers.split(",") if w]
    runs = [("auto", n, w) for n in (counts or [1]) for w in workers]
    runs += [] if "gvault-cpu" in skip else [("cpu", 1, workers[0])]
    for path, n, w in runs:
        ck.WORKERS_PER_GPU = w
        label = f"gvault-{path}" + (f"-{n}gpu" if path == "auto" and len(counts) > 1 else "")
        label += f"-{w or 'auto'}w" if path == "auto" and len(workers) > 1 else ""
        s1_state, s2_state = spread(state, n), spread(state2, n)
        d = os.path.join(base, f"repo-{path}")
        shutil.rmtree(d, ignore_errors=True)
        for f in (d + ".key",):
            if os.path.exists(f):
                os.remove(f)
        repo = gvault.Repository.init(d, accel="auto")
        ck.reset_link_stats()
        traces = []
        ck._trace = {}
        t1, s1 = timed(lambda: ck.save(repo, "bench", s1_state, path=path))
        l1 = ck.link_stats()
        ck.reset_link_stats()
        traces.append(ck._trace)
        ck._trace = {}
        t2, s2 = timed(lambda: ck.save(repo, "bench", s2_state, path=path))
        l2 = ck.link_stats()
        ck.reset_link_stats()
        traces.append(ck._trace)
        ck._trace = {}
        # Each tensor back where it was saved from (a.device for one GPU).
        where = None if n > 1 else a.device
        t3, out = timed(lambda: ck.load(repo, "bench", device=where, path=path))
        l3 = ck.link_stats()
        traces.append(ck._trace)
        ck._trace = None
        ok = all(out[k].device == s2_state[k].device and torch.equal(out[k], s2_state[k]) for k in s2_state)
        res["runs"][label] = {"gpus": n if path == "auto" else 0,
                              "workers_per_gpu": ck._workers_per_gpu(n) if path == "auto" else None,
            "save_gbps": gb(t1), "save2_gbps": gb(t2), "load_gbps": gb(t3),
            "save_s": t1, "save2_s": t2, "load_s": t3, "bytes_added_2": s2["bytes_added"],
            "link_save": l1, "link_save2": l2, "link_load": l3, "round_trip_ok": ok,
            "packs_on_device": s1["packs_sealed_on_device"],
            # Seconds in each phase, summed over threads (phases overlap).
            "phase_s": {k: {p: round(v, 3) for p, v in tr.items()}
                        for k, tr in zip(("save", "save2", "load"), traces)},
        }
        out = s1_state = s2_state = None  # free the GPU memory before the next run
        shutil.rmtree(d, ignore_errors=True)
    if "torch" not in skip:
        f = os.path.join(base, "torch.pt")
        t1, _ = timed(lambda: torch.save(state, f))
        t2, _ = timed(lambda: torch.save(state2, f))
        t3, _ = timed(lambda: torch.load(f, map_location=a.device))
        res["runs"]["torch.save"] = {"save_gbps": gb(t1), "save2_gbps": gb(t2), "load_gbps": gb(t3)}
    if "safetensors" not in skip:
        try:
            from safetensors.torch import load_file, save_file
        except ImportError:
            res["runs"]["safetensors"] = "not installed"
        else:
            f = os.path.join(base, "x.safetensors")
            t1, _ = timed(lambda: save_file(state, f))
            t2, _ = timed(lambda: save_file(state2, f))
            t3, _ = timed(lambda: load_file(f, device=a.device))
            res["runs"]["safetensors"] = {"save_gbps": gb(t1), "save2_gbps": gb(t2), "load_gbps": gb(t3)}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if not a.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
