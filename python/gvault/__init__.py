"""gvault: an encrypted key-value store, deduplicating encrypted backups, and
checkpoints that are chunked, deduplicated and sealed where they live (on
the GPU for CUDA tensors).

    import gvault
    with gvault.Store("db", encrypt=True) as s:
        s.put(b"k", b"v")
    repo = gvault.Repository.init("repo")          # key file repo.key
    gvault.checkpoint.save(repo, "step-100", model.state_dict())
    state = gvault.checkpoint.load(repo, "step-100", device="cuda")
"""

from ._errors import (
    AccelError,
    Closed,
    Corruption,
    GvaultError,
    InvalidArgument,
    IoError,
    KeyError,
    Locked,
    NotARepository,
    NotAStore,
    NotFound,
    ReadOnly,
    Unsupported,
)
from ._native import Repository, ScanIter, Store, StoreSnapshot
from . import checkpoint

__all__ = [
    "AccelError",
    "Closed",
    "Corruption",
    "GvaultError",
    "InvalidArgument",
    "IoError",
    "KeyError",
    "Locked",
    "NotARepository",
    "NotAStore",
    "NotFound",
    "ReadOnly",
    "Repository",
    "ScanIter",
    "Store",
    "StoreSnapshot",
    "Unsupported",
    "checkpoint",
]
