"""Sphinx configuration of chute's API reference (built from the docstrings; a test builds it
with warnings as errors, so a broken docstring fails CI)."""

project = "chute"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
# GPU-only packages are imported lazily inside functions; nothing to mock at import time.
html_theme = "alabaster"
exclude_patterns = ["_build"]
