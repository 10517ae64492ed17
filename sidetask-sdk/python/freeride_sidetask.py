"""The side-task SDK's Python module under its old name: `freeride.sidetask` (the `freeride`
package beside this file, and what `pip install freeride` installs) is the module itself."""
from freeride import sidetask as _sidetask
from freeride.sidetask import *  # noqa: F401,F403

globals().update({k: v for k, v in vars(_sidetask).items() if not k.startswith("__")})
