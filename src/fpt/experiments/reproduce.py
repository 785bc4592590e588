"""`fpt reproduce`: the paper's tables (fpt.experiments.paper.REPRODUCIBLE) as sweeps.

A `Reproduction` is some tables on some tasks: each run any of its tables needs is one cell of a
sweep per task (fpt.experiments.sweep), run once and shared between the tables; Table 12, whose
rows are depths rather than variants, gets sweeps of its own. `run_reproduction` runs them and
writes each table beside the paper's figures; the controls table (issue 32) also scores each of
its runs on shuffled inputs and is written from the run folders (fpt.experiments.controls).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from fpt.core.errors import TOO_SHALLOW, FptError
from fpt.experiments.budget_search import BUDGET_PROBES, budget_section, check_budget_search, choose_budget
from fpt.experiments.budget_search import probe_spec as budget_probe
from fpt.experiments.paper import (
    COLLECTION_TABLES,
    PAPER_VARIANTS,
    PUBLISHED_TABLES,
    REPRODUCIBLE,
    VARIANTS,
    row_label,
)
from fpt.experiments.rate_search import (
    PROBES,
    adopt_choice,
    check_has_validation,
    check_rates,
    own_rate_folder,
    probe_section,
    probe_spec,
    search_rates,
)
from fpt.experiments.sweep import Executor, LocalExecutor, run_sweep, write_results_csv
from fpt.experiments.sweep_spec import (
    GRID_ONLY_KEYS,
    MAX_CELLS,
    MAX_PARALLEL,
    SweepSpec,
    check_cell_options,
    option_names,
    yaml_value,
)
from fpt.experiments.tables import failed_runs_section
from fpt.tracking import Tracker
from fpt.tracking.sinks import warn
from fpt.training.config import coerce_option


def parse_set_options(items: list[str] | None) -> dict:
    """`--set KEY=VALUE ...` -> {key: value read as YAML}; Reproduction.check checks the keys and values."""
    options = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FptError(f"--set takes KEY=VALUE (e.g. --set precision=bf16), got {item!r}")
        options[key.replace("-", "_")] = yaml_value(value)
    return options


@dataclass
class Reproduction:
    """Several of the paper's tables on some tasks: each run once, shared between the tables."""

    tables: list[str]
    tasks: list[str] | None = None  # None: every task of the tables
    budget: int = 500
    seeds: int = 3
    backbone: str = "minilm"
    parallel: int = 1
    skip_variants: tuple[str, ...] = ()  # kept in the tables as "skipped", never run
    options: dict = dataclasses.field(default_factory=dict)  # more `fpt train` options for every run
    # arm -> the rates its own is chosen from on validation (fpt.experiments.rate_search)
    lr_search: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    # m3, tourism: the budgets each subset's is chosen from on validation (fpt.experiments.budget_search)
    budget_search: list[int] = dataclasses.field(default_factory=list)

    def check(self) -> None:
        """Refuse, in one line, unknown tables and budgets, seeds or parallel runs out of range, and an
        --lr-search that cannot be run (fpt.experiments.rate_search)."""
        unknown = [t for t in self.tables if t not in REPRODUCIBLE]
        if not self.tables or unknown:
            raise FptError(f"unknown table {', '.join(unknown) or '(none)'}; choose from {', '.join(REPRODUCIBLE)}")
        if self.budget < 1 or self.seeds < 1 or not 1 <= self.parallel <= MAX_PARALLEL:
            raise FptError(f"--budget and --seeds must be at least 1, --parallel from 1 to {MAX_PARALLEL}")
        if self.seeds > MAX_CELLS:
            raise FptError(f"--seeds {self.seeds:,}: at most {MAX_CELLS:,} runs are made by one command")
        offered = {t for table in self.tables for t in REPRODUCIBLE[table].grid["task"]}
        missing = [t for t in self.tasks or [] if t not in offered]
        if missing:
            raise FptError(
                f"{', '.join(self.tables)} has no task {', '.join(missing)}; its tasks are {', '.join(sorted(offered))}"
            )
        unknown_variants = [v for v in self.skip_variants if v not in VARIANTS]
        if unknown_variants:
            raise FptError(
                f"--skip-variants: unknown variant {', '.join(unknown_variants)}; choose from {', '.join(VARIANTS)}"
            )
        unknown_options = sorted(set(self.options) - option_names())
        if unknown_options:
            raise FptError(
                f"--set: unknown option {', '.join(unknown_options)}; use `fpt train` option names with underscores"
            )
        grid_keys = sorted(set(self.options) & set(GRID_ONLY_KEYS))
        if grid_keys:
            raise FptError(
                f"--set {grid_keys[0]}: the tables choose it for each run; use --tasks, --seeds or a sweep spec"
            )
        self.options = {key: coerce_option(key, value, "--set") for key, value in self.options.items()}
        self._check_lr_search()
        self._check_budget_search()
        for _, spec, _ in self.sweeps():
            check_cell_options(spec, f"{', '.join(self.tables)} (--budget, --set)")
        for _, _, spec, _ in self.budget_probe_sweeps():
            check_cell_options(spec, f"{', '.join(self.tables)} (--budget-search)")
        for task, _, _, spec in self.probe_sweeps():
            check_cell_options(spec, f"{', '.join(self.tables)} (--lr-search)")
            check_has_validation(task, spec.options)

    def _check_lr_search(self) -> None:
        if self.lr_search:
            # (the controls grid has no axis but task, variant and seed, so one rate is chosen per task and arm)
            arms = list(REPRODUCIBLE["controls"].grid["variant"])
            check_rates(self.lr_search, self.tables, arms, self.skip_variants)

    def _check_budget_search(self) -> None:
        if self.budget_search:
            check_budget_search(self.tables, self.options, self.skip_variants)

    def common_options(self) -> dict:
        """The `fpt train` options every run of these tables shares (--set ones last, so they win)."""
        # the reference methods are no row of these tables: a cell scores them only where --set asks (an
        # ETTh1 cell's took 5 minutes), a competition's in one cell per subset (baselines_once)
        options = {"steps": self.budget, "backbone": self.backbone, "baselines": False}
        if "epochs" in self.options:  # --set epochs=N gives the budget instead
            del options["steps"]
        if "table6" in self.tables:  # steps to convergence (each run's own plateau) are read from 20 evaluations
            options["eval_every"] = max(1, self.budget // 20)
        if "controls" in self.tables:
            options.update(same_dropout(self.options))
        return {**options, **self.options}

    def sweeps(
        self, chosen: dict[tuple[str, str], float] | None = None, budgets: dict[str, int] | None = None
    ) -> list[tuple[str, SweepSpec, list[dict]]]:
        """(sub-folder, spec, cells not run) per task, and per variant of a table whose rows are not
        variants (Table 12: OUT/listops-table12-<variant>/, its own depths per variant). An arm with
        --lr-search is left out of its task's shared sweep; once `chosen` holds its rate (task, arm ->
        rate; fpt.experiments.rate_search), it has a sweep of its own at that rate. With
        --budget-search, `budgets` (task -> steps, chosen on validation) gives a competition subset's
        budget, and a subset it lacks is not run yet; None: --budget for every task (what check reads)."""
        plans = []
        for task in self._tasks():
            budget = self._budget_of(task, budgets)
            if budget is None:
                continue
            wanted, axes, task_options = self._variant_plan(task, budget)
            shared = [v for v in wanted if v not in self.lr_search]
            if shared:
                plans.append((sweep_folder(task), task, {"variant": shared, **axes}, task_options))
            for arm in wanted:
                if (task, arm) in (chosen or {}):
                    folder = own_rate_folder(sweep_folder(task), arm)
                    plans.append((folder, task, {"variant": [arm], **axes}, task_options, {"lr": chosen[task, arm]}))
            for table in self.tables:
                grid = REPRODUCIBLE[table].grid
                if REPRODUCIBLE[table].row_key != "variant" and task in grid["task"]:
                    for variant in grid["variant"]:
                        others = {
                            k: v[variant] if isinstance(v, dict) else v
                            for k, v in grid.items()
                            if k not in ("task", "variant")
                        }
                        plans.append((f"{task}-{table}-{variant}", task, {"variant": [variant], **others}, {}))
        return [self._sweep(*plan) for plan in plans]

    def _budget_of(self, task: str, budgets: dict[str, int] | None) -> int | None:
        if budgets is None or not self.budget_search or task not in self._competition_tasks():
            return self.budget
        return budgets.get(task)

    def budget_probe_sweeps(self) -> list[tuple[str, str, SweepSpec, list[int]]]:
        """(task, sub-folder, spec, budgets) for each competition subset with --budget-search: its first
        arm's seed 0 at each budget (fpt.experiments.budget_search), the baselines off."""
        probes = []
        for task in self._tasks() if self.budget_search else []:
            if task not in self._competition_tasks():
                continue
            wanted, _, task_options = self._variant_plan(task)
            arm = next(v for v in wanted if v not in self.skip_variants)
            budgets = {b: {**self._competition_options(b), "steps": b} for b in self.budget_search}
            own = ("steps", "warmup_steps", "eval_every")  # what a budget sets; --set wins
            cells = {b: {k: v for k, v in o.items() if k in own and k not in self.options} for b, o in budgets.items()}
            folder = f"{BUDGET_PROBES}/{sweep_folder(task)}"
            name = f"reproduce-{BUDGET_PROBES}-{sweep_folder(task)}"
            spec = budget_probe(name, task, arm, cells, self._options(task_options), self.parallel)
            probes.append((task, folder, spec, list(self.budget_search)))
        return probes

    def probe_sweeps(self) -> list[tuple[str, str, str, SweepSpec]]:
        """(task, arm, sub-folder, spec) for each arm with --lr-search: its seed 0 at each rate."""
        probes = []
        for task in self._tasks():
            wanted, axes, task_options = self._variant_plan(task)
            for arm in (v for v in wanted if v in self.lr_search):
                name = own_rate_folder(sweep_folder(task), arm)
                rates, options = self.lr_search[arm], self._options(task_options)
                spec = probe_spec(f"reproduce-{name}-probes", task, arm, rates, axes, options, self.parallel)
                probes.append((task, arm, f"{PROBES}/{name}", spec))
        return probes

    def _tasks(self) -> list[str]:
        return [t for t in _tasks_of(self.tables) if not self.tasks or t in self.tasks]

    def _variant_plan(self, task: str, budget: int | None = None) -> tuple[list[str], dict, dict]:
        """The variants the tables whose rows are variants want on `task`, their other axes (a
        forecast's horizons; one value where --set gives it) and their task options (a competition
        subset's: for `budget` steps, default --budget)."""
        by_variant = [
            t for t in self.tables if task in REPRODUCIBLE[t].grid["task"] and REPRODUCIBLE[t].row_key == "variant"
        ]
        wanted = list(dict.fromkeys(v for t in by_variant for v in REPRODUCIBLE[t].grid["variant"]))
        axes = {
            k: [self.options[k]] if k in self.options else values
            for t in by_variant
            for k, values in REPRODUCIBLE[t].grid.items()
            if k not in ("task", "variant")
        }
        task_options = {k: v for t in by_variant for k, v in REPRODUCIBLE[t].task_options.get(task, {}).items()}
        if any(t in COLLECTION_TABLES for t in by_variant):
            task_options.update(self._competition_options(budget or self.budget), steps=budget or self.budget)
        if "ucr" in by_variant:  # the fast recipe, the best validation evaluation kept (fpt.experiments.ucr_tables)
            from fpt.experiments.ucr_tables import ucr_options  # an end-of-run module (fpt.cli.sweeps)

            found = ucr_options(budget or self.budget, self.options)
            task_options.update(found, **same_dropout({**found, **self.options}))
        return wanted, axes, task_options

    def _competition_options(self, budget: int) -> dict:
        """The options of a competition table's runs (m3, tourism), as benchmarks/m3_fpt.py trained the
        committed M3 results: the fast recipe, its warm-up and the evaluations scaled to the budget
        (a tenth, at most 100 steps; every fifth of it, at least 100 steps apart), every arm at the
        recipe's dropout (same_dropout); the baselines, off in every table's cells (common_options), are
        scored in one cell per subset (`baselines_once`). --set wins over each."""
        from fpt.training.config import RECIPES

        recipe = self.options.get("recipe", "fast")
        return {
            "recipe": recipe,
            "warmup_steps": min(RECIPES.get(recipe, {}).get("warmup_steps", 0), budget // 10),
            "eval_every": max(100, budget // 5),
            **same_dropout({"recipe": recipe, **self.options}),
        }

    def _options(self, task_options: dict, own: dict | None = None) -> dict:
        """The options of a sweep's cells: the common ones, the task's where --set leaves them, then `own`."""
        task_only = {k: v for k, v in task_options.items() if k not in self.options}
        return {**self.common_options(), **task_only, **(own or {})}

    def _sweep(
        self, folder: str, task: str, grid: dict, task_options: dict, own: dict | None = None
    ) -> tuple[str, SweepSpec, list[dict]]:
        """One plan as a sweep, less its cells not to run: a variant skipped for time, or a depth
        above a pretrained backbone's own (`layers`, for random init only a config, is any)."""
        variants = [v for v in grid["variant"] if v not in self.skip_variants]
        others = {k: v for k, v in grid.items() if k != "variant"}  # e.g. table12's layers
        skipped = [
            {
                "task": task,
                "variant": v,
                **dict(zip(others, values)),
                "status": "skipped",
                "failure": "skipped",
                "error": "skipped for time (--skip-variants)",
            }
            for v in grid["variant"]
            if v in self.skip_variants
            for values in itertools.product(*others.values())
        ]
        if "layers" in others and all(VARIANTS[v].get("init") != "random" for v in grid["variant"]):
            from fpt.backbones import backbone_depth

            backbone = self.common_options()["backbone"]
            depth = backbone_depth(backbone)  # None: not known here; the run itself refuses, in one line
            deep = [k for k in others["layers"] if depth is not None and k > depth]
            others["layers"] = [k for k in others["layers"] if k not in deep]
            skipped += [
                {
                    "task": task,
                    "variant": v,
                    "layers": k,
                    "status": "skipped",
                    "failure": TOO_SHALLOW,
                    "error": f"needs a {k}-layer backbone; {backbone} has {depth}",
                }
                for v in variants
                for k in deep
            ]
        spec = SweepSpec(
            f"reproduce-{folder}",
            {"task": [task], "variant": variants, **others, "seed": list(range(self.seeds))},
            self._options(task_options, own),
            self.parallel,
            variants=PAPER_VARIANTS,
        )
        if task in self._competition_tasks() | self._ucr_tasks() and "baselines" not in self.options:
            spec = baselines_once(spec)
        return folder, spec, skipped

    def _competition_tasks(self) -> set[str]:
        return {t for table in self.tables if table in COLLECTION_TABLES for t in REPRODUCIBLE[table].grid["task"]}

    def _ucr_tasks(self) -> set[str]:  # each set's MiniRocket and 1-NN DTW, scored by one of its cells
        return set(REPRODUCIBLE["ucr"].grid["task"]) if "ucr" in self.tables else set()


def baselines_once(spec: SweepSpec) -> SweepSpec:
    """A competition subset's sweep with its cells named ARM-seedK, the first (its first arm's seed 0)
    scoring statsforecast's baselines on the test split (`fpt train --baselines`) and no other: they
    are the same for every arm and seed (no seed reaches them), and take minutes on M3 monthly."""
    cells = spec.cells()
    named = {
        f"{c.values['variant']}-seed{c.values['seed']}": {**c.values, **({"baselines": True} if i == 0 else {})}
        for i, c in enumerate(cells)
    }
    return dataclasses.replace(spec, grid={}, named_cells=named)


def same_dropout(options: dict) -> dict:
    """The dropout of the recipe in `options`, to give every run of the controls table: a recipe's
    dropout reaches only a frozen body (TrainConfig.from_recipe), so without it the controls that
    train blocks (attention, block, full) would run another recipe than fpt. Rates given with --set win."""
    from fpt.training.config import TrainConfig

    frozen = TrainConfig.from_recipe(options.get("recipe", "paper"))
    pinned = {"dropout": frozen.dropout}
    if frozen.attention_dropout is not None:
        pinned["attention_dropout"] = frozen.attention_dropout
    return {} if {"dropout", "attention_dropout"} & set(options) else pinned


def sweep_folder(task: str) -> str:
    """The folder of a task's shared sweep: its name, a colon made a dash (ett:ETTh1 -> ett-ETTh1)."""
    return task.replace(":", "-")


def _tasks_of(tables: list[str]) -> list[str]:
    return list(dict.fromkeys(t for table in tables for t in REPRODUCIBLE[table].grid["task"]))


def table_rows(table: str, rows: list[dict]) -> list[dict]:
    """A table's own runs, each labelled with its row: its tasks' shared sweeps, or the sweeps
    made for it (Table 12's depths)."""
    grid, row_key = REPRODUCIBLE[table].grid, REPRODUCIBLE[table].row_key

    def own(sweep: str) -> bool:
        if row_key == "variant":  # a task's shared sweep, or an arm's at its own rate (--lr-search)
            folders = [sweep_folder(t) for t in grid["task"]]
            return sweep in folders + [own_rate_folder(f, v) for f in folders for v in grid["variant"]]
        return any(sweep.startswith(f"{task}-{table}-") for task in grid["task"])

    return [{**r, "row": row_label(table, r)} for r in rows if own(r["sweep"]) and r.get("variant") in grid["variant"]]


def run_reproduction(
    plan: Reproduction,
    out: Path,
    progress: bool | str = True,
    executor: Executor | None = None,
    tracker: Tracker | None = None,
) -> tuple[list[dict], str]:
    """Run every sweep of the plan under OUT/<task>/, write OUT/results.csv, OUT/<table>.md with
    its chart OUT/<table>.png (ours beside the paper; for controls, each arm's score per task),
    OUT/results.md (every table) and OUT/curves.png; return the rows and the tables' text."""
    from fpt.core.paths import write_text
    from fpt.experiments.plots import learning_curves

    plan.check()

    def run(spec: SweepSpec, where: Path) -> list[dict]:
        return run_sweep(spec, where, progress, executor, tracker)

    # an arm's own rate (--lr-search) and a subset's budget (--budget-search) are chosen on validation first
    records = search_rates(plan.probe_sweeps(), out, run)
    budget_rows, budgets = _choose_budgets(plan, out, run)
    probe_rows = [row for record in records.values() for row in record["probes"]] + budget_rows
    chosen = {key: record["lr"] for key, record in records.items() if "lr" in record}
    own = {own_rate_folder(sweep_folder(task), arm): records[task, arm] for task, arm in chosen}
    rows = list(probe_rows)
    steps = {task: choice["steps"] for task, choice in budgets.items() if "steps" in choice}
    for folder, spec, skipped in plan.sweeps(chosen, steps if plan.budget_search else None):
        if folder in own:  # an arm at its own rate: its seed 0 is the chosen probe
            adopt_choice(own[folder], spec, out / folder)
        if spec.cells():
            rows += [{**row, "sweep": folder} for row in run_sweep(spec, out / folder, progress, executor, tracker)]
        rows += [{**row, "sweep": folder} for row in skipped]
    write_results_csv(rows, out / "results.csv")
    learning_curves(rows[len(probe_rows) :], out / "curves.png")  # the probes are no arm's runs
    options, setting = plan.common_options(), _setting_text(plan)
    ran_on = (executor or LocalExecutor()).describe(plan.parallel)
    texts = []
    for table in plan.tables:
        subset = table_rows(table, rows)
        title = f"{table} ({setting}; {plan.seeds} seed(s); {ran_on})"
        if table == "controls":
            text = _controls_text(subset, f"Ran as: {setting}; {ran_on}.", plan.seeds, out / f"{table}.png")
            text += probe_section(records)
            subset = probe_rows + subset  # a probe that failed is listed under the table too
        elif table == "ucr":
            from fpt.experiments.ucr_tables import ucr_text

            text = ucr_text(subset, title)
        elif table in COLLECTION_TABLES:
            text = _competition_text(table, subset, title, budgets)
            subset = [row for row in budget_rows if row["task"] in REPRODUCIBLE[table].grid["task"]] + subset
        else:
            text = _table_text(table, subset, title, options, out / f"{table}.png")
        text += failed_runs_section(subset)
        write_text(out / f"{table}.md", text)
        texts.append(text)
    text = "\n".join(texts)
    write_text(out / "results.md", text)
    return rows, text


def _setting_text(plan: Reproduction) -> str:
    """The options every run shares, as a table's title gives them ("steps=500, backbone=minilm")."""
    from fpt.training.config import TRANSFORMER_ONLY_OPTIONS

    options = plan.common_options()
    if plan.budget_search:  # each subset's own, said under its table
        options["steps"] = f"chosen on validation from {'/'.join(map(str, plan.budget_search))}"
    setting = ", ".join(f"{k}={v}" for k, v in options.items())
    transformer_only = [k for k in TRANSFORMER_ONLY_OPTIONS if k in options]
    if transformer_only:
        setting += f" ({', '.join(transformer_only)}: transformer rows only)"
    return setting


def _choose_budgets(plan: Reproduction, out: Path, run) -> tuple[list[dict], dict[str, dict]]:
    """Each competition subset's probes (--budget-search) trained by `run(spec, folder)` (a finished
    one is kept), their rows, and the budget chosen from them per task (budget_search.choose_budget)."""
    rows, choices = [], {}
    for task, folder, spec, budgets in plan.budget_probe_sweeps():
        found = [{**row, "sweep": folder} for row in run(spec, out / folder)]
        rows += found
        choices[task] = choose_budget(found, budgets)
    return rows, choices


def _controls_text(subset: list[dict], note: str, seeds: int, chart: Path) -> str:
    """Each finished run also scored on shuffled inputs; the table from the run files, and its picture."""
    from fpt.experiments.controls import controls_markdown, read_arm_run
    from fpt.experiments.plots import controls_chart
    from fpt.experiments.shuffled import score_shuffled

    done = [Path(row["run_dir"]) for row in subset if row["status"] == "done"]
    for run_dir, why in score_shuffled(done).items():
        warn(f"{run_dir}: not scored on shuffled inputs ({why}); the table leaves it out of that column")
    arms = [a for a in map(read_arm_run, done) if a is not None]
    title = f"controls ({seeds} seed(s))"
    drawn = controls_chart(arms, chart, title)
    return controls_markdown(arms, title, note) + (f"\n![{title} as a picture]({chart.name})\n" if drawn else "")


def _competition_text(table: str, subset: list[dict], title: str, budgets: dict[str, dict]) -> str:
    """A competition's tables (fpt.experiments.competition_tables) from its finished runs' files, and
    how each subset's budget was chosen where --budget-search chose it (`budgets`: task -> choice)."""
    from fpt.experiments.competition_tables import competition_markdown, read_subset_run

    done = [Path(row["run_dir"]) for row in subset if row["status"] == "done"]
    skipped = tuple(dict.fromkeys(row["variant"] for row in subset if row["status"] == "skipped"))
    runs = [r for r in map(read_subset_run, done) if r is not None]
    mine = {task: choice for task, choice in budgets.items() if task in REPRODUCIBLE[table].grid["task"]}
    return competition_markdown(table, runs, title, skipped, searched=bool(mine)) + budget_section(mine)


def _table_text(table: str, subset: list[dict], title: str, options: dict, chart: Path) -> str:
    """A paper's table (ours beside its figures, with a chart where there is one) or a later paper's."""
    from fpt.experiments.plots import steps_chart, table_chart
    from fpt.experiments.published_tables import published_table
    from fpt.experiments.tables import markdown_table, split_title, steps_table

    if table in PUBLISHED_TABLES:  # a later paper's figures beside ours (the time-series tables)
        return published_table(table, subset, title, options)
    paper_table = REPRODUCIBLE[table].paper_table
    if table == "table6":
        text = steps_table(subset, title + ": gradient steps to convergence", "row")
        drawn = steps_chart(subset, chart, f"{table}: steps to convergence, ours beside the paper's", "row")
    else:
        text = markdown_table(subset, f"{title}: {split_title(subset)}, paper in parentheses", paper_table, "row")
        drawn = table_chart(
            subset, chart, f"{table}: {split_title(subset)}, ours beside the paper's", paper_table, "row"
        )
    return text + (f"\n![{table}: ours beside the paper's figures]({chart.name})\n" if drawn else "")
