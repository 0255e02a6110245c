"""Checkpoints in a gvault repository: deduplicated, encrypted, verified.

    gvault.checkpoint.save(repo, "step-1000", {"model": model.state_dict(),
                                               "optim": opt.state_dict(),
                                               "step": 1000})
    state = gvault.checkpoint.load(repo, "step-1000", device="cuda:0")

`state` is a nested dict (lists and tuples too) of tensors and arrays --
torch tensors on any device, numpy arrays, anything with `__dlpack__` or
`__cuda_array_interface__` -- and plain metadata (None, bool, int, float,
str, bytes). A checkpoint is a snapshot of the repository: each tensor's
bytes are chunked on their own (tiny tensors share a segment), so a tensor
that did not change costs no new bytes, and a manifest records names,
dtypes (bfloat16 and float8 included), shapes and strides
(docs/repository.md section 11).

CUDA tensors take the GPU-resident path: chunk boundaries and chunk ids
are computed on the device, the ids looked up, only new chunks sealed
(AES-256-GCM) on the device, and only their ciphertext copied to the host.
`load` reverses it: ciphertext goes to the device, is opened there and
every chunk re-hashed against its id. Each GPU handles its own tensors,
all GPUs at once: packs hold chunks of one place (host memory or one
GPU). `path="cpu"` moves tensors through host memory instead; both paths
write the same chunks, and for tensors on one GPU the same packs.
`link_stats()` counts the bytes the package copies between host and
device.

Non-contiguous views are saved as their logical contents; `load` returns
contiguous tensors. Without `ml_dtypes`, numpy bfloat16 / float8 arrays
load as uint16 / uint8 arrays of the same bits.
"""

import base64
import ctypes
import json
import sys
import threading
import time
import warnings

from . import _errors

FORMAT = "gvault-checkpoint"
VERSION = 1
#: Tensors smaller than this share segments (and chunks) with their neighbours.
TINY = 64 * 1024
#: A segment of tiny tensors holds at most this many bytes.
TINY_GROUP = 1 << 20
#: Offsets of tensors inside a shared segment are multiples of this.
ALIGN = 16

# dtype name -> item size
_SIZES = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "complex64": 8, "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
# Raw stand-ins when numpy lacks a dtype (ml_dtypes missing).
_RAW = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}

_link_lock = threading.Lock()
#: The benchmark sets a dict here to collect the seconds spent in each
#: phase, summed over threads (save: sources, then the engine's chunk, add,
#: gather, seal, d2h, write, join, commit; load: the engine's read_host,
#: fetch, h2d, open, scatter, join).
_trace = None


def _timed(phase, t0):
    """Adds the time since `t0` to `phase` when tracing; returns now."""
    t = time.perf_counter()
    if _trace is not None:
        with _link_lock:
            _trace[phase] = _trace.get(phase, 0.0) + t - t0
    return t
_link = {"d2h_bytes": 0, "h2d_bytes": 0, "d2h_copies": 0, "h2d_copies": 0}


def link_stats():
    """Bytes and copies this package moved between host and GPU memory
    since the last reset: {"d2h_bytes", "h2d_bytes", "d2h_copies", "h2d_copies"}."""
    with _link_lock:
        return dict(_link)


def reset_link_stats():
    with _link_lock:
        for k in _link:
            _link[k] = 0


def _count(direction, n):
    with _link_lock:
        _link[direction + "_bytes"] += int(n)
        _link[direction + "_copies"] += 1


def _torch():
    return sys.modules.get("torch")


def _np():
    return sys.modules.get("numpy")


def _import_numpy():
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise _errors.Unsupported("loading numpy arrays needs numpy installed") from e
    return numpy


def _torch_dtype_name(dt):
    name = str(dt).replace("torch.", "")
    aliases = {"half": "float16", "float": "float32", "double": "float64"}
    name = aliases.get(name, name)
    if name not in _SIZES:
        raise _errors.InvalidArgument(f"tensors of dtype {dt} cannot be saved")
    return name


def _torch_dtype(name):
    torch = _torch()
    dt = getattr(torch, name, None)
    if dt is None:
        raise _errors.Unsupported(f"this torch has no dtype {name}")
    return dt


def _numpy_dtype_name(dt):
    np = _np()
    if dt.kind in "OUSMm" or dt.hasobject or dt.fields is not None:
        raise _errors.InvalidArgument(f"numpy arrays of dtype {dt} cannot be saved")
    name = dt.name
    if name == "bool_":
        name = "bool"
    if name not in _SIZES:
        raise _errors.InvalidArgument(f"numpy arrays of dtype {dt} cannot be saved")
    if np is not None and dt.byteorder == ">":
        raise _errors.InvalidArgument("big-endian arrays cannot be saved; use .astype('<...')")
    return name


_EXT = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _ml_dtypes():
    """ml_dtypes (numpy's bfloat16 and float8 types), or None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def _numpy_dtype(name):
    np = _import_numpy()
    if name not in _EXT:
        return np.dtype(name)
    ml = _ml_dtypes()
    if ml is not None and hasattr(ml, name):
        return np.dtype(getattr(ml, name))
    raw = _RAW[_SIZES[name]]
    warnings.warn(
        f"numpy has no {name} (install ml_dtypes); returning its bits as {raw}",
        stacklevel=3,
    )
    return np.dtype(raw)


class _Leaf:
    """A tensor of the state, made contiguous, with where its bytes are."""

    __slots__ = ("name", "kind", "dtype", "shape", "source_strides", "device", "obj", "nbytes",
                 "segment", "offset")

    def __init__(self, name, kind, dtype, shape, source_strides, device, obj, nbytes):
        self.name, self.kind, self.dtype, self.shape = name, kind, dtype, list(shape)
        self.source_strides, self.device, self.obj, self.nbytes = source_strides, device, obj, nbytes
        self.segment = self.offset = None

    def on_cuda(self):
        return self.device.startswith("cuda")

    def host_ptr(self):
        """Address of the contiguous host bytes (self.obj must be on the host)."""
        torch = _torch()
        if torch is not None and isinstance(self.obj, torch.Tensor):
            return self.obj.data_ptr()
        return self.obj.__array_interface__["data"][0]

    def u8(self):
        """The bytes as a flat torch uint8 tensor (host or device)."""
        return _flat_u8(self.obj)

    def manifest(self):
        strides, acc = [], 1
        for d in reversed(self.shape):
            strides.append(acc)
            acc *= d
        return {
            "name": self.name, "kind": self.kind, "dtype": self.dtype, "shape": self.shape,
            "strides": list(reversed(strides)), "source_strides": self.source_strides,
            "device": self.device, "segment": self.segment, "offset": self.offset,
            "nbytes": self.nbytes,
        }


def _flat_u8(o):
    """A contiguous tensor or array's bytes as a flat torch uint8 tensor,
    sharing its memory."""
    torch = _torch()
    if not isinstance(o, torch.Tensor):
        return torch.from_numpy(o.reshape(-1).view("uint8"))
    if o.is_complex():
        o = torch.view_as_real(o)
    return o.reshape(-1).view(torch.uint8)


def _leaf_of(x, name):
    """A _Leaf when x is a tensor or array, else None."""
    torch, np = _torch(), _np()
    if torch is not None and isinstance(x, torch.Tensor):
        return _torch_leaf(x, name, "torch")
    if np is not None and isinstance(x, np.ndarray):
        return _numpy_leaf(x, name, "numpy")
    if np is not None and isinstance(x, np.generic) and not isinstance(x, (np.str_, np.bytes_)):
        return _numpy_leaf(np.asarray(x), name, "numpy_scalar")
    if hasattr(x, "__cuda_array_interface__"):
        if torch is None:
            raise _errors.Unsupported(f"{name}: saving __cuda_array_interface__ objects needs torch")
        return _torch_leaf(torch.as_tensor(x, device="cuda"), name, "array")
    if hasattr(x, "__dlpack__") and not isinstance(x, (bytes, str)):
        if torch is not None:
            return _torch_leaf(torch.from_dlpack(x), name, "array")
        np = _import_numpy()
        return _numpy_leaf(np.from_dlpack(x), name, "array")
    return None


def _torch_leaf(t, name, kind):
    torch = _torch()
    if t.layout != torch.strided:
        raise _errors.InvalidArgument(f"{name}: {t.layout} tensors cannot be saved (use .to_dense())")
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    dtype = _torch_dtype_name(t.dtype)
    source_strides = list(t.stride())
    device = str(t.device)
    if t.device.type not in ("cpu", "cuda"):
        t = t.cpu()
    elif t.device.type == "cuda" and t.device.index is None:
        device = f"cuda:{torch.cuda.current_device()}"
    t = t.contiguous()
    return _Leaf(name, kind, dtype, t.shape, source_strides, device, t, t.numel() * t.element_size())


def _numpy_leaf(a, name, kind):
    np = _np()
    dtype = _numpy_dtype_name(a.dtype)
    size = a.dtype.itemsize
    source_strides = [s // size for s in a.strides]
    c = np.ascontiguousarray(a)
    return _Leaf(name, kind, dtype, a.shape, source_strides, "cpu", c, c.nbytes)


def _encode(x, name, leaves):
    """The manifest tree node of x; tensors are appended to leaves."""
    leaf = _leaf_of(x, name)
    if leaf is not None:
        leaves.append(leaf)
        return {"$x": len(leaves) - 1}
    if x is None or isinstance(x, (bool, int, float, str)):
        return {"$v": x}
    if isinstance(x, (bytes, bytearray)):
        return {"$b": base64.b64encode(bytes(x)).decode()}
    if isinstance(x, dict):
        items = []
        for k, v in x.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise _errors.InvalidArgument(f"{name}: dict keys must be str or int, not {type(k).__name__}")
            items.append([k, _encode(v, f"{name}.{k}" if name else str(k), leaves)])
        node = {"$d": items}
        if type(x) is not dict:
            node["$o"] = 1  # an OrderedDict (as state_dict returns)
        return node
    if isinstance(x, (list, tuple)):
        kids = [_encode(v, f"{name}.{i}" if name else str(i), leaves) for i, v in enumerate(x)]
        return {"$t": kids} if isinstance(x, tuple) else {"$l": kids}
    raise _errors.InvalidArgument(
        f"{name or 'state'}: {type(x).__name__} is neither a tensor nor plain metadata "
        "(None, bool, int, float, str, bytes, dict, list, tuple)")


def _decode(node, tensors):
    if "$x" in node:
        return tensors[node["$x"]]
    if "$v" in node:
        return node["$v"]
    if "$b" in node:
        return base64.b64decode(node["$b"])
    if "$d" in node:
        pairs = [(k, _decode(v, tensors)) for k, v in node["$d"]]
        if node.get("$o"):
            import collections

            return collections.OrderedDict(pairs)
        return dict(pairs)
    if "$l" in node:
        return [_decode(v, tensors) for v in node["$l"]]
    if "$t" in node:
        return tuple(_decode(v, tensors) for v in node["$t"])
    raise _errors.Corruption(f"checkpoint manifest: unknown node {sorted(node)}")


def _segments(leaves):
    """Tensor-aligned segments: each tensor of TINY bytes or more alone;
    runs of tiny ones together (offsets ALIGN-aligned), up to TINY_GROUP."""
    segs, tiny, used = [], None, 0
    for i, leaf in enumerate(leaves):
        if leaf.nbytes >= TINY:
            tiny = None
            leaf.segment, leaf.offset = len(segs), 0
            segs.append([i])
            continue
        at = -(-used // ALIGN) * ALIGN
        if tiny is None or at + leaf.nbytes > TINY_GROUP:
            tiny, at = [], 0
            segs.append(tiny)
        leaf.segment, leaf.offset = len(segs) - 1, at
        tiny.append(i)
        used = at + leaf.nbytes
    lens = []
    for s in segs:
        last = leaves[s[-1]]
        lens.append(last.offset + last.nbytes)
    return segs, lens


class _Host:
    """A host buffer: a bytearray (no numpy or torch needed) or a torch tensor."""

    def __init__(self, n):
        self.buf = bytearray(n)
        self.ptr = ctypes.addressof((ctypes.c_char * max(n, 1)).from_buffer(self.buf)) if n else 0


def _host_source(leaves, seg, length):
    """(keep-alive object, address) of a segment's bytes in host memory."""
    if len(seg) == 1 and leaves[seg[0]].nbytes == length and length > 0:
        leaf = leaves[seg[0]]
        if leaf.on_cuda():
            leaf.obj = leaf.obj.cpu()  # the CPU path: plaintext crosses the link
            _count("d2h", leaf.nbytes)
        return leaf.obj, leaf.host_ptr()
    h = _Host(length)
    for i in seg:
        leaf = leaves[i]
        if leaf.nbytes == 0:
            continue
        if leaf.on_cuda():
            leaf.obj = leaf.obj.cpu()
            _count("d2h", leaf.nbytes)
        ctypes.memmove(h.ptr + leaf.offset, leaf.host_ptr(), leaf.nbytes)
    return h, h.ptr


def _device_source(leaves, seg, length, device):
    """(flat uint8 cuda tensor, device index) of a segment's bytes."""
    torch = _torch()
    if len(seg) == 1 and leaves[seg[0]].nbytes == length and length > 0:
        u = leaves[seg[0]].u8()
        return u, u.device.index
    buf = torch.zeros(length, dtype=torch.uint8, device=device)
    for i in seg:
        leaf = leaves[i]
        if leaf.nbytes:
            if not leaf.on_cuda():
                _count("h2d", leaf.nbytes)
            buf[leaf.offset:leaf.offset + leaf.nbytes].copy_(leaf.u8())
    return buf, buf.device.index


#: Worker threads a GPU (the engine's workers: while one seals or opens on
#: the GPU, others read or write packs, one copy through host memory each,
#: the bound of a save or load). None: half the cores shared among the
#: GPUs in use, 4 to 16 a GPU.
WORKERS_PER_GPU = None


def _add_steps(steps):
    if _trace is not None:
        with _link_lock:
            for phase, sec in steps.items():
                _trace[phase] = _trace.get(phase, 0.0) + sec


def _add_moved(moved):
    with _link_lock:
        for k, v in moved.items():
            _link[k] += int(v)


def save(repo, name, state, *, path="auto"):
    """Saves `state` as checkpoint `name` in `repo` (a gvault.Repository);
    returns a dict: snapshot id, bytes_total, bytes_new (new chunk bytes),
    bytes_added (to the repository), chunk and pack counts.

    path: "auto" seals CUDA tensors on their GPU; "cpu" copies them to the
    host first. Both write the same chunks."""
    if path not in ("auto", "cpu"):
        raise _errors.InvalidArgument('path must be "auto" or "cpu"')
    leaves = []
    tree = _encode(state, "", leaves)
    segs, lens = _segments(leaves)
    manifest = json.dumps({
        "format": FORMAT, "version": VERSION, "tree": tree,
        "tensors": [leaf.manifest() for leaf in leaves], "segments": lens,
    }, sort_keys=True, separators=(",", ":")).encode()
    keep = [manifest]
    m = _Host(len(manifest))
    ctypes.memmove(m.ptr, manifest, len(manifest)) if manifest else None
    keep.append(m)
    sources = [("host", 0, m.ptr, len(manifest))]
    t = time.perf_counter()
    for s, length in zip(segs, lens):
        if path == "auto" and any(leaves[i].on_cuda() for i in s):
            first = next(leaves[k] for k in s if leaves[k].on_cuda())
            u8, dev = _device_source(leaves, s, length, first.obj.device)
            keep.append(u8)
            sources.append(("cuda", dev, u8.data_ptr(), length))
        else:
            obj, ptr = _host_source(leaves, s, length)
            keep.append(obj)
            sources.append(("host", 0, ptr, length))
    if any(src[0] == "cuda" for src in sources):
        # Every kernel that produces the tensors (or the segment copies
        # above) is done before the device jobs, on their own streams,
        # read them.
        _sync_devices()
    t = _timed("sources", t)
    snap, (stats, steps, moved) = repo._save_checkpoint(name, sources, WORKERS_PER_GPU)
    _add_steps(steps)
    _add_moved(moved)
    del keep
    stats["snapshot"] = snap
    stats["name"] = name
    return stats


def _target(leaf, device):
    """The device a loaded tensor goes to: "cpu" or "cuda:N"."""
    torch = _torch()
    if leaf["kind"] in ("numpy", "numpy_scalar"):
        return "cpu"
    if torch is None:
        return "cpu"
    if device is None:
        want = leaf["device"]
        if want.startswith("cuda"):
            idx = int(want.split(":")[1]) if ":" in want else 0
            if torch.cuda.is_available() and idx < torch.cuda.device_count():
                return f"cuda:{idx}"
        return "cpu"
    d = torch.device(device)
    if d.type == "cuda":
        return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"
    return "cpu" if d.type == "cpu" else str(d)


def _read_manifest(reader):
    try:
        man = json.loads(reader.manifest())
    except ValueError as e:
        raise _errors.Corruption(f"checkpoint manifest is not JSON: {e}") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise _errors.Corruption("snapshot holds no gvault checkpoint manifest")
    if man.get("version", 0) > VERSION:
        raise _errors.Unsupported(f"checkpoint format {man.get('version')} is newer than this gvault reads ({VERSION})")
    lens = reader.segment_lens()
    if list(lens) != list(man["segments"]):
        raise _errors.Corruption("checkpoint segments differ from its manifest")
    try:
        for t in man["tensors"]:
            n = 1
            for d in t["shape"]:
                n *= d
            if t["dtype"] not in _SIZES or n * _SIZES[t["dtype"]] != t["nbytes"] or \
                    not 0 <= t["segment"] < len(lens) or t["offset"] < 0 or \
                    t["offset"] + t["nbytes"] > lens[t["segment"]] or min(t["shape"], default=0) < 0:
                raise _errors.Corruption(f"checkpoint manifest: tensor {t.get('name')!r} is inconsistent")
        _check_tree(man["tree"], len(man["tensors"]))
    except (KeyError, TypeError) as e:
        raise _errors.Corruption(f"checkpoint manifest is malformed: {e!r}") from None
    return man


def _check_tree(node, count):
    """Raises Corruption unless every tensor reference in the tree is in range."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            raise _errors.Corruption("checkpoint manifest: a tree node is not an object")
        if "$x" in n and not (isinstance(n["$x"], int) and 0 <= n["$x"] < count):
            raise _errors.Corruption("checkpoint manifest: tensor reference out of range")
        if "$d" in n:
            stack.extend(v for _, v in n["$d"])
        for k in ("$l", "$t"):
            if k in n:
                stack.extend(n[k])


def load(repo, name, device=None, *, snapshot=None, path="auto"):
    """Loads checkpoint `name` (its newest snapshot, or `snapshot`).

    device: None puts each torch tensor back on the device it was saved
    from (the CPU when that GPU is absent); "cpu", "cuda", "cuda:1" or a
    torch.device put every torch tensor there. numpy arrays stay numpy.
    Tensors bound for a GPU take the GPU-resident path unless path="cpu".
    Every chunk is checked against its id; damage raises gvault.Corruption."""
    if path not in ("auto", "cpu"):
        raise _errors.InvalidArgument('path must be "auto" or "cpu"')
    repo.refresh()
    reader = repo._reader(name, snapshot)
    man = _read_manifest(reader)
    tensors = man["tensors"]
    lens = man["segments"]
    targets = [_target(t, device) for t in tensors]
    by_seg = [[] for _ in lens]
    for i, t in enumerate(tensors):
        by_seg[t["segment"]].append(i)
    torch = _torch()
    # Where each segment is read to: a cuda device, or the host.
    seg_dev = []
    for s, members in enumerate(by_seg):
        devs = {targets[i] for i in members}
        if path == "auto" and len(devs) == 1 and next(iter(devs)).startswith("cuda"):
            seg_dev.append(next(iter(devs)))
        else:
            seg_dev.append("cpu")
    bufs = [None] * len(lens)
    for s, n in enumerate(lens):
        if seg_dev[s] != "cpu":
            continue
        wants_torch = torch is not None and any(tensors[i]["kind"] not in ("numpy", "numpy_scalar")
                                                for i in by_seg[s])
        if wants_torch:
            b = torch.empty(n, dtype=torch.uint8)
        else:
            np = _import_numpy()
            b = np.empty(n, dtype=np.uint8)
        bufs[s] = b
    targets_native = []
    for s, n in enumerate(lens):
        if seg_dev[s] == "cpu":
            b = bufs[s]
            ptr = b.data_ptr() if torch is not None and isinstance(b, torch.Tensor) \
                else b.__array_interface__["data"][0]
            targets_native.append(("host", 0, ptr, n))
        else:
            dev = torch.device(seg_dev[s])
            bufs[s] = torch.empty(n, dtype=torch.uint8, device=dev)
            targets_native.append(("cuda", dev.index, bufs[s].data_ptr(), n))
    if any(t[0] == "cuda" for t in targets_native):
        _sync_devices()  # the allocations are done before the copies land
    steps, moved = reader.load(targets_native, WORKERS_PER_GPU)
    _add_steps(steps)
    _add_moved(moved)
    values = []
    for i, t in enumerate(tensors):
        values.append(_make(t, bufs[t["segment"]], len(by_seg[t["segment"]]) > 1, targets[i]))
    return _decode(man["tree"], values)


def _torch_view(u8, dtype, shape):
    """Bytes (a flat uint8 tensor) seen as a tensor of dtype and shape."""
    torch = _torch()
    if dtype.startswith("complex"):
        real = torch.float32 if dtype == "complex64" else torch.float64
        return torch.view_as_complex(u8.view(real).reshape(list(shape) + [2]))
    return u8.view(_torch_dtype(dtype)).reshape(shape)


def _sync_devices():
    """Waits for every GPU's queued work (the accelerator's jobs run on
    their own streams and must see what torch's kernels wrote)."""
    torch = _torch()
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)


def _make(t, buf, shared, target):
    torch = _torch()
    lo, hi = t["offset"], t["offset"] + t["nbytes"]
    if torch is not None and isinstance(buf, torch.Tensor):
        if t["kind"] in ("numpy", "numpy_scalar"):
            _import_numpy()
            a = buf[lo:hi].cpu().numpy().view(_numpy_dtype(t["dtype"])).reshape(t["shape"]).copy()
            return a[()] if t["kind"] == "numpy_scalar" else a
        x = _torch_view(buf[lo:hi], t["dtype"], t["shape"])
        if shared:
            x = x.clone()
        if str(x.device) != target and not (target == "cpu" and x.device.type == "cpu"):
            x = x.to(target)
        return x
    a = buf[lo:hi].view(_numpy_dtype(t["dtype"])).reshape(t["shape"])
    if shared:
        a = a.copy()
    return a[()] if t["kind"] == "numpy_scalar" else a


# safetensors interchange -------------------------------------------------

_ST = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16",
    "bfloat16": "BF16", "float32": "F32", "float64": "F64", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
_ST_BACK = {v: k for k, v in _ST.items()}


def export_safetensors(repo, name, file, *, snapshot=None):
    """Writes checkpoint `name` to `file` in the safetensors format: each
    tensor under its dotted name; the checkpoint's tree (metadata
    included) in `__metadata__["gvault.tree"]`. Every chunk is checked."""
    repo.refresh()
    reader = repo._reader(name, snapshot)
    man = _read_manifest(reader)
    lens = man["segments"]
    hosts = [_Host(n) for n in lens]
    reader.load([("host", 0, h.ptr, n) for h, n in zip(hosts, lens)])
    header, pos, names = {}, 0, set()
    for t in man["tensors"]:
        if t["dtype"] not in _ST:
            raise _errors.Unsupported(f"safetensors has no dtype {t['dtype']} (tensor {t['name']!r})")
        if t["name"] in names:
            raise _errors.InvalidArgument(f"two tensors are named {t['name']!r}")
        names.add(t["name"])
        header[t["name"]] = {"dtype": _ST[t["dtype"]], "shape": t["shape"],
                             "data_offsets": [pos, pos + t["nbytes"]]}
        pos += t["nbytes"]
    header["__metadata__"] = {
        "format": "gvault",
        "gvault.tree": json.dumps(man["tree"], sort_keys=True),
        "gvault.tensors": json.dumps([[t["name"], t["kind"], t["device"]] for t in man["tensors"]]),
    }
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(file, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for t in man["tensors"]:
            f.write(memoryview(hosts[t["segment"]].buf)[t["offset"]:t["offset"] + t["nbytes"]])
    return pos


def read_safetensors(file, framework="numpy"):
    """The state in a safetensors file: the nested tree a gvault export
    wrote, else a flat dict of name -> array ("numpy") or tensor ("torch")."""
    with open(file, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise _errors.Corruption(f"{file}: not a safetensors file (too short)")
    n = int.from_bytes(data[:8], "little")
    if 8 + n > len(data):
        raise _errors.Corruption(f"{file}: header runs past the end")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise _errors.Corruption(f"{file}: header is not JSON: {e}") from None
    meta = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + n:]
    flat = {}
    for k, v in header.items():
        dt = _ST_BACK.get(v.get("dtype"))
        if dt is None:
            raise _errors.Unsupported(f"{file}: tensor {k!r} has dtype {v.get('dtype')}")
        b, e = v["data_offsets"]
        count = 1
        for d in v["shape"]:
            count *= d
        if not 0 <= b <= e <= len(body) or e - b != count * _SIZES[dt]:
            raise _errors.Corruption(f"{file}: tensor {k!r} has bad offsets")
        raw = bytearray(body[b:e])
        if framework == "torch":
            torch = _torch() or __import__("torch")
            x = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            flat[k] = _torch_view(x, dt, v["shape"])
        else:
            np = _import_numpy()
            flat[k] = np.frombuffer(raw, dtype=np.uint8).view(_numpy_dtype(dt)).reshape(v["shape"])
    if "gvault.tree" in meta and "gvault.tensors" in meta:
        names = json.loads(meta["gvault.tensors"])
        if all(nm[0] in flat for nm in names):
            return _decode(json.loads(meta["gvault.tree"]), [flat[nm[0]] for nm in names])
    return flat


def import_safetensors(repo, name, file, *, framework="numpy"):
    """Saves the tensors of a safetensors file as checkpoint `name`."""
    return save(repo, name, read_safetensors(file, framework))
