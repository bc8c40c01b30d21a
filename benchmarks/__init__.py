"""River's benchmark harness (``make bench``, ``python -m benchmarks``): outside the
product and outside ``INSTALLED_APPS``. No product package imports it (import-linter)."""
