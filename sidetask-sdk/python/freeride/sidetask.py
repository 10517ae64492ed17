"""freeride side tasks from Python: a ctypes wrapper over libfreeride_sidetask.so.

    from freeride import SideTask                      # (or: from freeride.sidetask import SideTask)
    task = SideTask(name="mytask", device=0)          # or SideTask(config={...})
    ... load data, task.alloc(...) ...
    task.created()
    while not done:
        if not task.wait_for_grant():                  # False: stop requested (SIGTERM)
            break
        with task.step():                              # times the step, learns its duration
            ...queue GPU work; synchronize it before the block ends...
    task.finish()

A task that can scale its work (a smaller minibatch) waits for a whole step or part of one:

        f = task.wait_for_step(0.25)                   # None: stop requested (SIGTERM)
        with task.step() if f >= 1.0 else task.partial_step(f):
            ...queue f of a step's work...

The library is found through $FREERIDE_SIDETASK_LIB, in the installed package (freeride/_lib/,
where `pip install freeride` puts it), or in the cargo target folders of the repository this file
is in (target/release, target/debug).
"""
import ctypes
import json
import os
from contextlib import contextmanager

SUBMITTED, CREATED, PAUSED, RUNNING, FINISHED, STOPPED = range(6)
STATE_NAMES = ["submitted", "created", "paused", "running", "finished", "stopped"]

OK = 0
ERR_TIMEOUT = -1
ERR_STOPPED = -2
ERR_INVALID = -3
ERR_TRANSITION = -4
ERR_OVER_BUDGET = -5
ERR_GPU = -6
ERR_PANIC = -7
ERR_STATE = -8

FOREVER = 2**64 - 1


class SideTaskError(RuntimeError):
    def __init__(self, code, message):
        super().__init__(f"{message} (code {code})")
        self.code = code


class OverBudget(SideTaskError):
    pass


class InvalidTransition(SideTaskError):
    pass


def _candidates():
    env = os.environ.get("FREERIDE_SIDETASK_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "_lib", "libfreeride_sidetask.so")
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # sidetask-sdk/python/freeride
    for profile in ("release", "debug"):
        yield os.path.join(root, "target", profile, "libfreeride_sidetask.so")
    yield "libfreeride_sidetask.so"


def load_library():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise OSError("libfreeride_sidetask.so not found:\n  " + "\n  ".join(errors))
    P = ctypes.c_void_p
    sig = {
        "frst_create": (P, [ctypes.c_char_p]),
        "frst_destroy": (None, [P]),
        "frst_last_error": (ctypes.c_char_p, []),
        "frst_state": (ctypes.c_int32, [P]),
        "frst_set_state": (ctypes.c_int32, [P, ctypes.c_int32]),
        "frst_wait_for_grant": (ctypes.c_int64, [P, ctypes.c_uint64, ctypes.c_uint64]),
        "frst_wait_for_step": (
            ctypes.c_int64,
            [P, ctypes.c_double, ctypes.c_uint64, ctypes.POINTER(ctypes.c_double)],
        ),
        "frst_step_begin": (ctypes.c_int32, [P]),
        "frst_step_end": (ctypes.c_int64, [P]),
        "frst_step_fraction_fits": (
            ctypes.c_int32,
            [P, ctypes.c_double, ctypes.POINTER(ctypes.c_double)],
        ),
        "frst_step_begin_partial": (ctypes.c_int32, [P, ctypes.c_double]),
        "frst_launch": (ctypes.c_int32, [P, ctypes.c_char_p, ctypes.c_uint64]),
        "frst_gemm": (
            ctypes.c_int32,
            [P, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64],
        ),
        "frst_fill": (ctypes.c_int32, [P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint8]),
        "frst_sync": (ctypes.c_int32, [P]),
        "frst_alloc": (ctypes.c_int32, [P, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
        "frst_free": (ctypes.c_int32, [P, ctypes.c_uint64]),
        "frst_mem_held": (ctypes.c_int64, [P]),
        "frst_request_stop": (ctypes.c_int32, [P]),
        "frst_stop_requested": (ctypes.c_int32, [P]),
        "frst_step_estimate_ns": (ctypes.c_int64, [P]),
        "frst_steps": (ctypes.c_int64, [P]),
        "frst_summary_json": (ctypes.c_char_p, [P, ctypes.c_char_p]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib = load_library()
    return _lib


def _error(code):
    msg = (_library().frst_last_error() or b"").decode(errors="replace")
    cls = {ERR_OVER_BUDGET: OverBudget, ERR_TRANSITION: InvalidTransition}.get(code, SideTaskError)
    return cls(code, msg)


class SideTask:
    """One side task: life cycle, grant waiting, step timing, memory budget, GEMMs through cuBLAS."""

    def __init__(self, config=None, **kwargs):
        cfg = dict(config or {})
        cfg.update(kwargs)
        self._lib = _library()
        self._h = self._lib.frst_create(json.dumps(cfg).encode())
        if not self._h:
            raise SideTaskError(ERR_INVALID, self._lib.frst_last_error().decode(errors="replace"))

    def _check(self, rc):
        if rc < 0:
            raise _error(rc)
        return rc

    # life cycle
    @property
    def state(self):
        return STATE_NAMES[self._check(self._lib.frst_state(self._h))]

    def set_state(self, state):
        if isinstance(state, str):
            state = STATE_NAMES.index(state)
        self._check(self._lib.frst_set_state(self._h, state))

    def created(self):
        self.set_state(CREATED)

    def finish(self):
        self.set_state(FINISHED)

    def stop(self):
        self._check(self._lib.frst_request_stop(self._h))

    @property
    def stop_requested(self):
        return bool(self._check(self._lib.frst_stop_requested(self._h)))

    # pacing
    def wait_for_grant(self, step_estimate_ns=0, timeout_s=None):
        """Waits for a grant that fits the next step. Returns the grant's time left in ns, 0 on
        timeout, or None when a stop was requested (the task is then stopped)."""
        timeout = FOREVER if timeout_s is None else int(timeout_s * 1e9)
        rc = self._lib.frst_wait_for_grant(self._h, int(step_estimate_ns), timeout)
        if rc == ERR_STOPPED:
            return None
        if rc == ERR_TIMEOUT:
            return 0
        return self._check(rc)

    def wait_for_step(self, min_fraction=0.25, timeout_s=None):
        """Waits for a grant that fits the next step or at least min_fraction of one. Returns 1.0
        (run a whole step: step()), the share that fits (run it with partial_step), 0.0 on
        timeout, or None when a stop was requested (the task is then stopped)."""
        timeout = FOREVER if timeout_s is None else int(timeout_s * 1e9)
        out = ctypes.c_double(0.0)
        rc = self._lib.frst_wait_for_step(self._h, float(min_fraction), timeout, ctypes.byref(out))
        if rc == ERR_STOPPED:
            return None
        if rc == ERR_TIMEOUT:
            return 0.0
        self._check(rc)
        return out.value

    @contextmanager
    def step(self):
        """Times one step (from entry to the synchronize at exit) and learns its duration."""
        self._check(self._lib.frst_step_begin(self._h))
        try:
            yield self
        finally:
            self._check(self._lib.frst_step_end(self._h))

    def fraction_fits(self, min_fraction=0.25):
        """The share of a step that fits the grant now: 1.0 (a whole step), min_fraction..1 (only
        part of one: run it with partial_step), or 0.0 (nothing, or the estimates are not learned
        yet). Does not wait."""
        out = ctypes.c_double(0.0)
        self._check(self._lib.frst_step_fraction_fits(self._h, float(min_fraction), ctypes.byref(out)))
        return out.value

    @contextmanager
    def partial_step(self, fraction):
        """A step of `fraction` of the usual work (at most what fraction_fits offered): queue
        about that share of a step's GPU work. Counted in partial_steps; scaled to a whole step, its
        duration may lower the step estimate, never raise it."""
        self._check(self._lib.frst_step_begin_partial(self._h, float(fraction)))
        try:
            yield self
        finally:
            self._check(self._lib.frst_step_end(self._h))

    @property
    def step_estimate_ns(self):
        return self._check(self._lib.frst_step_estimate_ns(self._h))

    @property
    def steps(self):
        return self._check(self._lib.frst_steps(self._h))

    # GPU
    def gemm(self, m, n, k, a, b, c):
        """Queues C (m x n) = A (m x k) . B (k x n) through cuBLAS on the task's stream: fp32,
        column-major device buffers from alloc(). A real kernel on a GPU; on the test bed its
        stand-in BLAS runs it for m*n*k/1000 ns."""
        self._check(self._lib.frst_gemm(self._h, int(m), int(n), int(k), int(a), int(b), int(c)))

    def fill(self, ptr, nbytes, value):
        """Sets nbytes of device memory at ptr (from alloc) to the byte value, synchronously."""
        self._check(self._lib.frst_fill(self._h, int(ptr), int(nbytes), int(value)))

    def launch(self, kernel, duration_ns):
        """Queues the simulated kernel `kernel` running `duration_ns` (test bed only)."""
        self._check(self._lib.frst_launch(self._h, kernel.encode(), int(duration_ns)))

    def sync(self):
        self._check(self._lib.frst_sync(self._h))

    def alloc(self, nbytes):
        out = ctypes.c_uint64(0)
        self._check(self._lib.frst_alloc(self._h, int(nbytes), ctypes.byref(out)))
        return out.value

    def free(self, ptr):
        self._check(self._lib.frst_free(self._h, int(ptr)))

    @property
    def mem_held(self):
        return self._check(self._lib.frst_mem_held(self._h))

    def summary(self, **extra):
        s = self._lib.frst_summary_json(self._h, json.dumps(extra).encode())
        if s is None:
            raise _error(ERR_INVALID)
        return json.loads(s.decode())

    def close(self):
        if self._h:
            self._lib.frst_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
