"""Hatchling build hook of the freeride wheel (pyproject.toml): builds the Rust workspace with
cargo (nothing to do when `scripts/test` or `cargo build --release --workspace --all-targets` ran
already: the wheel reuses that build), then packs its binaries into freeride/_lib/ and tags the
wheel for this platform.

Environment: FREERIDE_WHEEL_NO_BUILD=1 packs what is built without running cargo; CARGO_TARGET_DIR
is honoured."""
import os
import platform
import shutil
import subprocess

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# What freeride/_lib/ holds, as cargo lays it out in target/release/ (the freeride binary finds
# each beside itself: agent/src/layout.rs).
SHIPPED = [
    "freeride",
    "libfreeride.so",
    "libfreeride_sidetask.so",
    # The test bed: `freeride demo` / `freeride sim` exec freeride-sim (agent/src/testbed.rs).
    "freeride-sim",
    "pipesim",
    "pipesim-stage",
    "libcuda.so",
    "libcudart.so",
    "libnccl.so",
    "libcublas.so",
    "examples/train_loop",
    "examples/pagerank",
    "examples/image_batch",
]
BUILD = ["cargo", "build", "--release", "--workspace", "--all-targets"]


def platform_tag():
    """manylinux_<glibc>_<arch> of the glibc the binaries were built against (this machine's)."""
    libc, ver = platform.libc_ver()
    arch = platform.machine()
    if libc != "glibc" or not ver:
        return f"linux_{arch}"
    major, minor = ver.split(".")[:2]
    return f"manylinux_{major}_{minor}_{arch}"


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return
        root = self.root
        target = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target"), "release")
        if os.environ.get("FREERIDE_WHEEL_NO_BUILD") != "1":
            subprocess.run(BUILD, cwd=root, check=True)
        missing = [f for f in SHIPPED if not os.path.isfile(os.path.join(target, f))]
        if missing:
            raise RuntimeError(
                f"freeride wheel: {', '.join(missing)} not built in {target} ({' '.join(BUILD)})"
            )
        # Staged without their debug information (line tables: most of the size).
        stage = os.path.join(target, "wheel-stage")
        strip = shutil.which("strip")
        force = build_data.setdefault("force_include", {})
        for f in SHIPPED:
            src, dst = os.path.join(target, f), os.path.join(stage, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
            if strip:
                subprocess.run([strip, "--strip-debug", dst], check=True)
            force[dst] = f"freeride/_lib/{f}"
        force[os.path.join(root, "sidetask-sdk/include/freeride_sidetask.h")] = "freeride/include/freeride_sidetask.h"
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform_tag()}"
