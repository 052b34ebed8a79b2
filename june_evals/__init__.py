"""June's evals: a dataset of cases run through an agent (or two versions of it, side by side) as
real turns on the workers, each case scored once, the results kept as rows (docs/evals.md).

A Django app of its own, ``june_evals``, above ``sessions_app``: it starts turns through the
site's services, reads them through its models, and nothing of ``sessions_app`` or ``agents_app``
imports it back (the import contracts in pyproject.toml). Its tables have their own migrations,
so a site opts in by installing the app and nothing of the turn engine's schema moves."""
