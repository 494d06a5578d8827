"""MkDocs hooks: the README is the site's front page (its ``docs/`` links made site-relative),
so the two cannot differ; the site names the release it documents (pyproject.toml's version),
in its header, its page titles and its footer."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mkdocs is in the docs extra only; the tests read these hooks without it
    from mkdocs.structure.files import Files


def release(config: Any) -> str:
    """The version of pyproject.toml next to mkdocs.yml."""
    pyproject = Path(config["config_file_path"]).parent / "pyproject.toml"
    version: str = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    return version


def on_config(config: Any) -> Any:
    version = release(config)
    config["extra"]["release"] = version
    if not config["site_name"].endswith(version):
        config["site_name"] = f"{config['site_name']} {version}"
    config["copyright"] = f"Documentation of hdfs-region {version}"
    return config


def on_files(files: Files, config: Any) -> Files:
    from mkdocs.structure.files import File

    readme = Path(config["config_file_path"]).parent / "README.md"
    text = re.sub(r"\]\(docs/", "](", readme.read_text(encoding="utf-8"))
    files.append(File.generated(config, "index.md", content=text))
    return files


#: A Sphinx cross-reference role left in front of a name by the docstrings' reST
#: (``:class:`X``` renders as ``:class:<code>X</code>``).
_ROLE = re.compile(r":(?:class|mod|meth|func|attr|data|exc|obj):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """The API pages (docs/api/, from the docstrings) show a referenced name as code, without
    the reST role in front of it."""
    if page.file.src_uri.startswith("api/"):
        return _ROLE.sub("", html)
    return html
