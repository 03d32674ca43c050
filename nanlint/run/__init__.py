"""A run over many files, above the per-file lint: the settings (config), which files
(files), the pool of workers (jobs), the cache between runs, progress on stderr, notebooks,
the precision a project trains in (project_precision), the collector's settings, and the
runner that ties them together for `nanlint check` and `nanlint verify`."""
