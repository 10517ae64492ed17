#!/usr/bin/env python3
"""The PyTorch side-task example under its old path: it is `freeride.examples.torch_sidetask`
(python -m freeride.examples.torch_sidetask, once the freeride package is installed)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from freeride.examples.torch_sidetask import main  # noqa: E402

if __name__ == "__main__":
    main()
