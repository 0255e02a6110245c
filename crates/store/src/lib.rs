//! gvault-store: the LSM engine (work in progress).
