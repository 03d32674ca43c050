"""`nanlint server`: the language server (LSP over stdio) for editors.

It needs pygls (`pip install 'nanlint[server]'`); the linter itself does not, so importing this
package imports no pygls: `lsp.py` does, and only `nanlint server` imports it.
"""

INSTALL_HINT = "the language server needs pygls: pip install 'nanlint[server]'"
