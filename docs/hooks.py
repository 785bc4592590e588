"""MkDocs hooks: pages that live outside docs/ so that GitHub shows them where a reader looks for them.

benchmarks/README.md (written in part by benchmarks/readme_tables.py) becomes the Benchmarks page, with
the figures it shows from benchmarks/results/, and CONTRIBUTING.md the Contributing page. Each keeps
its repository path (benchmarks/README.md), so a relative link means the same on GitHub and here.
"""

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
# (path in the repository, path on the site): the benchmarks README keeps its own, its images resolve alike
PAGES = [("benchmarks/README.md", "benchmarks/README.md"), ("CONTRIBUTING.md", "contributing.md")]


def on_files(files, config):
    for source, uri in PAGES:
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / source)))
    text = (ROOT / "benchmarks" / "README.md").read_text()
    for image in sorted((ROOT / "benchmarks" / "results").rglob("*.png")):
        uri = image.relative_to(ROOT).as_posix()
        if uri.removeprefix("benchmarks/") in text:  # only the figures the page shows
            files.append(File.generated(config, uri, abs_src_path=str(image)))
    return files


def on_page_markdown(markdown, page, config, files):
    # the benchmarks' tables run to nine columns: give them the table of contents' width too (the
    # page opens with its own list of sections); front matter would show as a table on GitHub
    if page.file.src_uri == "benchmarks/README.md":
        page.meta["hide"] = ["toc"]
    return markdown
