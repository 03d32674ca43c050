"""The core, below every other layer: what a file is to nanlint. Its text and positions
(text, positions), the file's context that rules and the analysis read (context: names,
scopes, ops, canonical forms, probes), the torch ops (ops), findings and fixes as data
(diagnostics), the parse and its budgets (bounds), rule triggers, and the installation
(install: version, torch hints)."""
