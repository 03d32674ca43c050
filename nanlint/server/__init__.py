"""`nanlint server`: the language server (LSP over stdio) for editors.

It needs pygls (the `server` extra); the linter itself does not, so importing this package
imports no pygls: `lsp.py` does, and only `nanlint server` imports it.
"""

from ..core.install import InstallHint

# "the language server needs pygls: pip install 'nanlint[server] @ git+URL@COMMIT'", naming
# where this nanlint was installed from (nanlint is not on PyPI).
INSTALL_HINT = InstallHint("the language server needs pygls", "server")
