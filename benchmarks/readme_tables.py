"""The results tables of README.md and the benchmarks pages, made from the committed files under benchmarks/results/.

    .venv/bin/python benchmarks/readme_tables.py             # rewrite every table where it lives
    .venv/bin/python benchmarks/readme_tables.py --check     # exit 1 naming each table the files disagree with
    .venv/bin/python benchmarks/readme_tables.py --print speed   # one table, to stdout

A table lives between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in one file (PAGES: the
headline in README.md, every other table in the benchmarks page of its topic, benchmarks/*.md, whose
summary is benchmarks/README.md): what lies between the markers
is this script's output and nothing else, the prose around them is written by hand. Every figure
in a table is read or computed from a file; the script holds only labels, which rows to show and
how to word them. tests/test_readme_tables.py runs the check, so a table edited by hand, or a
result file changed without rerunning this script, fails the suite.

To add a run to the converged table: commit its run directory under benchmarks/results/ (config.json,
metrics.jsonl, summary.json; sittings.jsonl where converge.py ran it; evaluation.json where val
chose and test was scored once), add a `Converged` row to CONVERGED in tablegen/converged.py, run
this script. The front page's headline table is the `HEADLINES` list of tablegen/headline.py: a row
there names the run directories it reads, one per seed. Writing refuses while a run's summary.json
or metrics.jsonl there is untracked (an unfinished sweep, a run not yet added with `git add -f`): a
table must quote only what a clone has.

Each family of tables is a module of benchmarks/tablegen/ (tablegen/homes.py names them all and says
which file each lives in); this script is their command line. One of them, `results-index`
(tablegen/results_index.py), lists each entry of benchmarks/results/ that git tracks, its size, and
the tables that open its files while they are rendered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# benchmarks/ is not a package: its folder on the path makes tablegen/ importable when this file is
# loaded by path (the tests) as well as run as a script; appended, so it shadows no installed module
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

from tablegen.common import RESULTS, ROOT  # noqa: E402
from tablegen.homes import TABLES, by_home, charts_of, differences, render, strays, untracked_runs, update  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    parser.add_argument("--print", dest="show", choices=list(TABLES), help="print one table")
    parser.add_argument("--root", type=Path, default=ROOT, help="the folder holding README.md and benchmarks/")
    parser.add_argument(
        "names",
        nargs="*",
        choices=[[]] + list(TABLES),
        metavar="NAME",
        help=f"only these tables (default: all): {', '.join(TABLES)}",
    )
    parser.add_argument(
        "--allow-untracked", action="store_true", help="write even where a run under benchmarks/results is untracked"
    )
    args = parser.parse_args(argv)
    if args.show:
        print(render([args.show])[args.show], end="")
        return 0
    untracked = [] if args.check or args.allow_untracked else untracked_runs(RESULTS)
    if untracked:
        print(
            f"{untracked[0]} (and {len(untracked) - 1} more) is not tracked by git, and a table may quote it: "
            "git add -f its run's files, or move an unfinished run out of benchmarks/results "
            "(--allow-untracked writes anyway)",
            file=sys.stderr,
        )
        return 2
    homes = by_home(render(args.names))
    if args.check:
        wrong = strays(args.root)
        for home, tables in homes.items():
            wrong += [f"{home}: {line}" for line in differences((args.root / home).read_text(), tables)]
        for name, (path, _, is_current) in charts_of(homes):
            if not (args.root / path).is_file():
                wrong.append(f"{path}: missing; the {name} table shows it")
            elif not is_current(args.root / path):
                wrong.append(f"{path}: drawn from other runs than the {name} table's, or by older drawing code")
        for line in wrong:
            print(line, file=sys.stderr)
        if wrong:
            print("rerun: python benchmarks/readme_tables.py (then read the diff)", file=sys.stderr)
        return 1 if wrong else 0
    for home, tables in homes.items():
        path = args.root / home
        text = path.read_text()
        new = update(text, tables)
        if new != text:
            path.write_text(new)
        print(f"{len(tables)} tables written into {home}")
    for _, (path, draw, _) in charts_of(homes):
        draw(args.root / path)
        print(f"{path} drawn")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
