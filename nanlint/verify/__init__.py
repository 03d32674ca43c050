"""The runtime verifier behind `nanlint verify`.

It turns each finding's probe into two small programs (the original expression and its fix)
and runs them on adversarial inputs in float32, float16 and bfloat16, with and without
autocast, forward and backward, against a float64 reference. Statement-level findings run
built-in harnesses (a tiny model driven into the failure).

It never imports or runs the linted code: only the expressions extracted by the linter are
evaluated, by an interpreter that accepts a curated list of torch operations (sandbox.py).

Importing this package does not import torch; the modules that need it import it themselves
and are imported only when `nanlint verify` runs.
"""

from ..core.install import TORCH_INSTALL_URL, InstallHint

# One line: the pip command that adds the `verify` extra where this nanlint was installed
# from (nanlint is not on PyPI), and where to pick a torch build for a platform or CUDA.
INSTALL_HINT = InstallHint(
    "`nanlint verify` needs PyTorch", "verify",
    f" (for a specific platform or CUDA build, install torch first: {TORCH_INSTALL_URL})",
)
