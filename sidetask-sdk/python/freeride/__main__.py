"""`freeride` on PATH (and `python -m freeride`): execs the freeride binary installed in the
package (freeride/_lib/freeride), which finds libfreeride.so and the test bed beside itself."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "freeride")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(
            f"freeride: {exe} is missing: this copy of the package was not installed from a "
            "freeride wheel (pip install freeride; from a checkout: pip install .)\n"
        )
        return 127
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
