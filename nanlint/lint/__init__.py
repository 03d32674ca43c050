"""The per-file lint, above the rules and the analysis: parse a source once, walk it with the
rules that can fire on it and give them the file's context (engine), then apply their fixes
until the source is stable (fixes). The run, the server and the verifier call it."""
