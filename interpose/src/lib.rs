//! libfreeride.so — the LD_PRELOAD interposer (issue 3).
