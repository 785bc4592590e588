"""MkDocs hooks: pages that live outside docs/ so that GitHub shows them where a reader looks for them.

The benchmarks pages, benchmarks/*.md (their tables written by benchmarks/readme_tables.py), become the
Benchmarks section, with the figures they show from benchmarks/results/, and CONTRIBUTING.md the
Contributing page. The pages in docs/ link to them by their repository paths (../benchmarks/converged.md,
../CONTRIBUTING.md), which GitHub resolves; on the site those paths lie outside docs/, so each link is
pointed at the page's place here.
"""

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "benchmarks").glob("*.md"))
# (path in the repository, path on the site): the benchmarks pages keep their own, so their images and
# their links to each other resolve alike
PAGES = [*((page, page) for page in BENCHMARKS), ("CONTRIBUTING.md", "contributing.md")]
# a docs page's link to one of them, as GitHub reads it (from docs/), and as the site does
SITE_LINKS = {f"](../{source}": f"]({uri}" for source, uri in PAGES}


def on_files(files, config):
    for source, uri in PAGES:
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / source)))
    text = "".join((ROOT / page).read_text() for page in BENCHMARKS)
    for image in sorted((ROOT / "benchmarks" / "results").rglob("*.png")):
        uri = image.relative_to(ROOT).as_posix()
        if uri.removeprefix("benchmarks/") in text:  # only the figures the pages show
            files.append(File.generated(config, uri, abs_src_path=str(image)))
    return files


def on_page_markdown(markdown, page, config, files):
    # the benchmarks' tables run to nine columns: give them the table of contents' width too (the
    # summary lists the pages); front matter would show as a table on GitHub
    if page.file.src_uri in BENCHMARKS:
        page.meta["hide"] = ["toc"]
        return markdown
    for github, site in SITE_LINKS.items():
        markdown = markdown.replace(github, site)
    return markdown
