"""The test bed shipped in the package (no GPU needed): the stand-in libcuda.so.1, libcudart.so.13,
libnccl.so.2 and libcublas.so.13 under their real names, for running side tasks and programs on
the simulated GPU.

    eval "$(python -m freeride.testbed env)"     # LD_LIBRARY_PATH (and a private FREERIDE_SIM_DIR)
    python -m freeride.examples.torch_sidetask --device 0 --standalone --steps 20
"""
import os
import shlex
import sys
import tempfile

from . import lib_dir

# (name the loader looks for, file in _lib/), as pipesim's stand-in folder has them.
LINKS = [
    ("libcuda.so.1", "libcuda.so"),
    ("libcuda.so", "libcuda.so"),
    ("libcudart.so.13", "libcudart.so"),
    ("libnccl.so.2", "libnccl.so"),
    ("libcublas.so.13", "libcublas.so"),
]


def standins_dir():
    """_lib/standins/ with the stand-ins under their real names (made if needed)."""
    d = os.path.join(lib_dir(), "standins")
    os.makedirs(d, exist_ok=True)
    for link, target in LINKS:
        path = os.path.join(d, link)
        want = os.path.join("..", target)
        if os.path.islink(path) and os.readlink(path) == want:
            continue
        tmp = f"{path}.tmp-{os.getpid()}"
        os.symlink(want, tmp)
        os.replace(tmp, path)
    return d


def env_lines():
    lines = [f"export LD_LIBRARY_PATH={shlex.quote(standins_dir())}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"]
    if not os.environ.get("FREERIDE_SIM_DIR"):
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        lines.append(f"export FREERIDE_SIM_DIR={shlex.quote(os.path.join(base, f'freeride-sim-{os.getpid()}'))}")
    return lines


def main(argv):
    if argv[1:] == ["env"]:
        print("\n".join(env_lines()))
        return 0
    sys.stderr.write("usage: python -m freeride.testbed env\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
