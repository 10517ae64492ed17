"""freeride from Python: side tasks that use the GPU only inside the bubbles of a pipeline-parallel
training job (`freeride.sidetask`, a ctypes wrapper over libfreeride_sidetask.so), and the files
of the installed package (`freeride` command, libfreeride.so, the C header).

    from freeride import SideTask
    task = SideTask(name="mytask", device=0)
"""
import os

from .sidetask import (  # noqa: F401
    CREATED,
    FINISHED,
    PAUSED,
    RUNNING,
    STATE_NAMES,
    STOPPED,
    SUBMITTED,
    InvalidTransition,
    OverBudget,
    SideTask,
    SideTaskError,
    load_library,
)

__version__ = "0.1.0"

_HERE = os.path.dirname(os.path.abspath(__file__))


def lib_dir():
    """The folder of the installed binaries and libraries: the `freeride` executable,
    libfreeride.so (the interposer), libfreeride_sidetask.so (the SDK's C ABI), the test bed."""
    return os.path.join(_HERE, "_lib")


def include_dir():
    """The folder of the SDK's C header (freeride_sidetask.h)."""
    return os.path.join(_HERE, "include")
