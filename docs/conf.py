"""Sphinx configuration of jobq's documentation site.

Built in strict mode by ``.ci/run``::

    sphinx-build -E -W --keep-going -b html docs build/docs

Every warning fails the build: a link to a page or heading that does not
exist, a docstring Sphinx cannot parse, a page in no table of contents. The
build needs no network: no intersphinx inventories, and the Furo theme ships
its assets (it loads no web fonts).
"""

from __future__ import annotations

import jobq

project = "jobq"
author = "jobq contributors"
copyright = "jobq contributors"
release = version = jobq.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "conftest.py"]

# MyST: anchors for headings down to ###, so [text](page.md#a-heading) links
# are checked; (label)= targets for the rest.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# The API reference: members in source order, type hints in the signature.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "furo"
html_title = "jobq"
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
