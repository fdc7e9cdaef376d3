"""Vendors one public notebook into the corpus: its code cells only, without outputs.

    python tests/notebooks/vendor.py SOURCE OUT.ipynb "ORIGIN"

SOURCE is a Jupyter notebook (``.ipynb``) or a MyST markdown notebook (``.md`` with
```{code-cell}``` blocks, as numpy-tutorials writes them). Only the code is kept: the prose of
some sources has a licence that allows no derivatives, and the comparison needs only the code.
ORIGIN (repository, path, commit, licence) becomes the notebook's first, markdown, cell; the
same facts are listed in SOURCES.md.
"""

import re
import sys

import nbformat


def code_cells_of_myst(text):
    cells = []
    for match in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", text, re.M | re.S):
        lines = match.group(1).splitlines()
        # MyST cell options: a `---` fenced YAML block or `:key: value` lines at the top.
        if lines and lines[0].strip() == "---":
            end = lines.index("---", 1)
            lines = lines[end + 1 :]
        while lines and re.match(r"^:\w[\w-]*:", lines[0]):
            lines = lines[1:]
        cells.append("\n".join(lines).strip("\n"))
    return cells


def code_cells_of_ipynb(path):
    notebook = nbformat.read(path, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def main(source, out, origin):
    if source.endswith(".md"):
        with open(source, encoding="utf-8") as f:
            codes = code_cells_of_myst(f.read())
    else:
        codes = code_cells_of_ipynb(source)
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    }
    notebook.cells.append(nbformat.v4.new_markdown_cell(origin))
    notebook.cells.extend(nbformat.v4.new_code_cell(code) for code in codes if code.strip())
    for cell in notebook.cells:
        cell.pop("id", None)
    notebook.nbformat_minor = 4  # no cell ids: stable files
    nbformat.write(notebook, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
