"""The commands that read a trained run: evaluate, backtest, attention, export-backbone, export, predict,
report; and backbones and data, which read this machine."""

from __future__ import annotations

import argparse
import sys

from fpt.core.errors import FptError


def cmd_evaluate(args: argparse.Namespace) -> None:
    """`fpt evaluate RUN_DIR`: reload the run's last checkpoint, score the chosen splits (a PNG per split: a
    confusion matrix for a single-label classifier, sampled forecasts for a forecast; with --shuffle, each
    split again with its inputs' order shuffled) and write RUN_DIR/evaluation.json. Raises FptError while
    another process trains the run."""
    from fpt.core.scores import describe
    from fpt.experiments.plots import plot_confusion
    from fpt.tasks.forecasting import ForecastTask
    from fpt.training.config import check_threads
    from fpt.training.evaluation import evaluate
    from fpt.training.lifecycle import load_run
    from fpt.training.run_dir import RunDir

    check_threads(args.threads)
    shuffle_seed = _shuffle_option(args)
    RunDir.existing(args.run_dir).check_not_in_use()  # a run still training: its checkpoint moves on
    config, task, model, trainer = load_run(args.run_dir, device=args.device, threads=args.threads)
    shuffled = None
    if shuffle_seed is not None:
        from fpt.tasks.shuffle import ShuffledTask, what_is_shuffled

        shuffled = ShuffledTask(task, shuffle_seed)
        print(f"shuffled: {what_is_shuffled(task.spec)}, seed {shuffle_seed}")
    single_label = task.spec.num_outputs == 1 and not task.spec.regression
    results, mixed = {}, {}
    for split in _chosen_splits(task, args.splits):
        result = evaluate(model, task, config.eval_batch_size, split, confusion=single_label)
        if single_label:
            png = args.run_dir / f"confusion_{split}.png"
            plot_confusion(
                result.pop("confusion"),
                png,
                f"{config.task} on {config.backbone}: {split} (accuracy {result['accuracy']:.4f})",
            )
            result["confusion_png"] = str(png)
        if isinstance(task, ForecastTask):
            result["forecast_png"] = str(_draw_forecasts(args.run_dir, config, task, model, split))
        results[split] = result
        print(f"{split}: {describe(result)} on {result['examples']} examples, loss {result['loss']:.4f}")
        if single_label:
            print(f"  {_per_class(result)}; confusion matrix: {png}")
        if shuffled is not None:
            mixed[split] = evaluate(model, shuffled, config.eval_batch_size, split)
            print(
                f"{split}, shuffled {args.shuffle}: {describe(mixed[split])}, loss {mixed[split]['loss']:.4f}; "
                f"{_change(result, mixed[split])} from the ordered inputs"
            )
    evaluation = {"step": trainer.step, "splits": results}
    if shuffled is not None:
        evaluation["shuffled"] = {
            "order": args.shuffle,
            "seed": shuffled.seed,
            "what": what_is_shuffled(task.spec),
            "splits": mixed,
        }
    print(f"written: {RunDir(args.run_dir).write_evaluation(evaluation)}")
    for line in _recorded_beside(RunDir(args.run_dir), results):
        print(line)


def _per_class(result: dict, shown: int = 10) -> str:
    """ "per class: 0 0.950, 1 0.900, 2 -" for the first `shown` classes (- where the split has none of
    that class); evaluation.json holds every class's."""
    values = result["per_class_accuracy"]
    parts = [f"{label} {'-' if value is None else f'{value:.3f}'}" for label, value in enumerate(values[:shown])]
    more = f", ... ({len(values)} classes in evaluation.json)" if len(values) > shown else ""
    return f"per class: {', '.join(parts)}{more}"


def _recorded_beside(run, results: dict) -> list[str]:
    """What the run (a RunDir) recorded beside its test score when it ended, where this evaluation scored that
    split too: the intervals' test coverage and the baselines on the same split with the sentence on who wins.
    A damaged summary.json is a warning here: the evaluation itself is done and written."""
    from fpt.training.intervals import coverage_line
    from fpt.training.reference_scores import comparison_lines

    if not results:
        return []
    try:
        summary = run.read_summary()
    except FptError as exc:
        print(f"fpt: warning: {exc}", file=sys.stderr)
        return []
    beside = (summary or {}).get("baselines")
    lines = []
    if summary and "intervals" in summary and "test" in results:
        lines.append(f"{coverage_line(summary['intervals'])} (recorded when the run ended)")
    if beside and beside.get("split") in results:
        lines += [
            "recorded when the run ended, " + line if i == 0 else line
            for i, line in enumerate(comparison_lines(summary))
        ]
    return lines


def cmd_backtest(args: argparse.Namespace) -> None:
    """`fpt backtest RUN_DIR --origins N [--step S]`: the run's configuration trained again at each earlier
    origin (RUN_DIR/backtest/origin-k, resumable), scored beside the baselines there; the table, the mean
    and a sentence printed, RUN_DIR/backtest/backtest.json and .csv written (fpt.experiments.backtest)."""
    from fpt.experiments.backtest import run_backtest

    run_backtest(args.run_dir, args.origins, args.step, progress=args.progress, device=args.device)


def _draw_forecasts(run_dir, config, task, model, split: str):
    """RUN_DIR/forecast_<split>.png: four windows of the series' last channel (ETTh's oil
    temperature, the target of the field's univariate tables) spread over the split."""
    from fpt.experiments.plots import plot_forecasts
    from fpt.training.evaluation import forecast_samples

    channel = task.notes["channels"] - 1
    samples = forecast_samples(model, task, split, channel)
    name, horizon = task.notes["columns"][channel], task.notes["horizon"]
    title = f"{config.task}, channel {name}, {split}: forecasts of {horizon} steps, scaled values"
    return plot_forecasts(samples, run_dir / f"forecast_{split}.png", title)


def _shuffle_option(args: argparse.Namespace) -> int | None:
    """`fpt evaluate --shuffle tokens [--shuffle-seed N]`: the seed, or None without --shuffle."""
    from fpt.tasks.shuffle import check_shuffle

    if args.shuffle is None:
        if args.shuffle_seed is not None:
            raise FptError("--shuffle-seed goes with --shuffle tokens")
        return None
    check_shuffle(args.shuffle)
    seed = 0 if args.shuffle_seed is None else args.shuffle_seed
    if not 0 <= seed < 2**63:
        raise FptError(f"--shuffle-seed must be in 0..2^63-1, got {seed}")
    return seed


def _change(ordered: dict, shuffled: dict) -> str:
    """The shuffled score minus the ordered one, on the headline metric: "accuracy -0.4120"."""
    from fpt.core.scores import headline_metric

    metric = headline_metric(ordered)
    name = metric.upper() if metric == "mse" else metric
    return f"{name} {shuffled[metric] - ordered[metric]:+.4f}"


def _chosen_splits(task, which: str) -> tuple[str, ...]:
    """`fpt evaluate --splits`: all, test (the splits tables report) or names."""
    have = ", ".join(task.eval_splits)
    if which == "all":
        return task.eval_splits
    if which == "test":
        if not task.test_splits:
            raise FptError(f"task {task.name!r} has no test split (it has {have}); use --splits all")
        return task.test_splits
    names = tuple(name for name in which.split(",") if name)
    unknown = [name for name in names if name not in task.eval_splits]
    if unknown or not names:
        raise FptError(f"task {task.name!r} has no split {', '.join(unknown) or repr(which)}; it has {have}")
    return names


def cmd_backbones(args: argparse.Namespace) -> None:
    """`fpt backbones`: print each registered backbone, whether it loads on this machine, and how to get it."""
    from fpt.backbones import list_backbones

    print(f"{'name':<14} {'here':<5} description / how to get it")
    for entry in list_backbones():
        here = "yes" if entry.is_available() else "no"
        print(f"{entry.name:<14} {here:<5} {entry.description}")
        print(f"{'':<20} get: {entry.how_to_get}")
    print("Any Hugging Face hub id or local save_pretrained directory also works as --backbone.")


def cmd_attention(args: argparse.Namespace) -> None:
    """`fpt attention RUN_DIR`: write a PNG of layer --layer's attention, averaged over heads and --examples
    held-out inputs, and print its path. Raises FptError for a run with no attention (a baseline, --body none)."""
    from fpt.experiments.plots import mean_attention, plot_attention
    from fpt.training.lifecycle import load_run

    if args.examples < 1:
        raise FptError(f"--examples must be at least 1, got {args.examples}")
    config, task, model, trainer = load_run(args.run_dir, device=args.device)
    if config.model != "fpt":
        raise FptError(f"{args.run_dir} trained a {config.model}, which has no attention to plot")
    if config.body == "none":
        raise FptError(f"{args.run_dir} trained a --body none control, which has no attention layer to plot")
    attention = mean_attention(model, task, args.layer, args.examples)
    out = args.out or args.run_dir / f"attention_layer{args.layer}.png"
    title = f"{config.task} on {config.backbone}: layer {args.layer}, mean over heads (step {trainer.weights_step})"
    read = task.spec.seq_len if model.head.pooling == "flatten" else task.spec.last_k  # flatten: every token is read
    print(plot_attention(attention, out, title, read))


def cmd_data(args: argparse.Namespace) -> None:
    """`fpt data get NAME [--dest DIR]`: fetch (or generate) a dataset and print the folder tasks read it from."""
    from fpt.data.fetch import get_dataset

    path = get_dataset(args.name, args.dest)
    print(f"{args.name}: {path}")
    if args.dest is not None:
        print(f"train on it with --data-dir {path}")


def cmd_export_backbone(args: argparse.Namespace) -> None:
    """`fpt export-backbone RUN_DIR`: save the run's trained transformer body as .safetensors, its config and
    held-out score in the metadata. Without --out only a Bit Memory run from --init random --policy full has a
    default place: where --init bit reads it. Raises FptError for a baseline, a --body control or a run whose
    position table grew past the backbone's."""
    from fpt.backbones import bit_backbone_path, export_backbone
    from fpt.core.scores import headline_metric, metric_label
    from fpt.training.lifecycle import load_run
    from fpt.training.run_dir import RunDir

    if args.out is not None and args.out.is_dir():
        raise FptError(f"--out {args.out} is a directory; give the path of a .safetensors file")
    config, _, model, trainer = load_run(args.run_dir, device=args.device)
    if config.model != "fpt":
        raise FptError(f"{args.run_dir} trained a {config.model}, not a transformer backbone")
    if config.body != "backbone":
        raise FptError(f"{args.run_dir} trained a --body {config.body} control, not the backbone's own blocks")
    if model.extended_positions is not None:
        raise FptError(
            f"{args.run_dir} grew the position table to {model.extended_positions[1]} rows; "
            "export a run whose task fits the backbone's own positions"
        )
    is_bit = config.task == "bit-memory" and config.init == "random" and config.policy == "full"
    out = args.out
    if out is None:
        if not is_bit:
            raise FptError(
                "give --out: only a Bit Memory run from --init random with --policy full "
                "has a default place (the one --init bit reads)"
            )
        out = bit_backbone_path(config.backbone)
    final = (RunDir(args.run_dir).read_summary() or {}).get("final")
    metric = headline_metric(final) if final else "accuracy"  # a forecast's: mse
    accuracy = "unknown (run not finished)" if final is None else f"{final[metric]:.4f}"
    export_backbone(
        model.backbone,
        out,
        {
            "backbone": config.backbone,
            "task": config.task,
            "init": config.init,
            "policy": config.policy,
            "step": str(trainer.weights_step),
            metric: accuracy,
            "run": str(args.run_dir),
        },
    )
    print(
        f"backbone {config.backbone} after {trainer.weights_step} steps of {config.task} "
        f"(held-out {metric_label(metric)} {accuracy}): {out}"
    )
    if out == bit_backbone_path(config.backbone):
        print(f"use it with --init bit --backbone {config.backbone}")


def cmd_export(args: argparse.Namespace) -> None:
    """`fpt export RUN_DIR --format peft|hf --out DIR`: write the run as a PEFT adapter or a whole saved model
    (fpt.serve.export.export_run) and print where."""
    from fpt.serve.export import export_run

    print(f"{args.format} export of {args.run_dir}: {export_run(args.run_dir, args.format, args.out)}")


def cmd_predict(args: argparse.Namespace) -> None:
    """`fpt predict RUN_DIR --input FILE`: a run's (or an `fpt export --format hf` directory's) class
    probabilities for each input, in input order, to .csv (.jsonl for several labels per example), with the
    accuracy if the input has labels; a forecast's predicted steps instead. Output checked before any work."""
    from fpt.serve.predict import (
        accuracy,
        check_levels_wanted,
        check_output,
        check_replaceable,
        is_saved_model,
        load_saved_model,
        read_inputs,
        training_files,
        write_predictions,
    )
    from fpt.training.evaluation import eval_batch_for
    from fpt.training.inference import predict_probabilities
    from fpt.training.lifecycle import load_run

    if args.batch_size < 1:
        raise FptError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.level is not None:
        from fpt.training.intervals import check_levels

        check_levels(args.level)  # before any work
    if args.out is not None:
        check_output(args.out)
    if is_saved_model(args.run_dir):  # written by `fpt export --format hf`
        task, model = load_saved_model(args.run_dir, args.device)
    else:
        _, task, model, _ = load_run(args.run_dir, device=args.device)
    if args.out is not None:  # once the task names its training data; before any prediction
        check_replaceable(args.out, [args.input, *training_files(task)], args.force)
    if task.spec.regression:  # a forecast: windows from an .npz, or the steps after a CSV series
        from fpt.serve.predict import predict_forecast

        out = args.out or args.run_dir / f"predictions-{args.input.name}.csv"
        intervals = _recorded_intervals(args.run_dir)
        batch = eval_batch_for(task, args.batch_size)
        print("\n".join(predict_forecast(model, task, args.input, out, batch, intervals, args.level)))
        return
    check_levels_wanted(task, args.level)
    batches, labels = read_inputs(args.input, task, eval_batch_for(task, args.batch_size))
    probabilities = predict_probabilities(model, batches)
    suffix = ".csv" if task.spec.num_outputs == 1 else ".jsonl"
    out = write_predictions(args.out or args.run_dir / f"predictions-{args.input.name}{suffix}", probabilities)
    print(f"{len(probabilities)} predictions: {out}")
    if labels is not None:
        print(f"accuracy {accuracy(probabilities, labels):.4f} on the labels in {args.input.name}")


def _recorded_intervals(source) -> dict | None:
    """The intervals a forecast run recorded when its test was scored (summary.json), or an export carries."""
    from fpt.serve.predict import is_saved_model
    from fpt.training.run_dir import RunDir

    if is_saved_model(source):
        from fpt.models.transformer import read_pretrained_config

        return read_pretrained_config(source).get("fpt", {}).get("intervals")
    return (RunDir(source).read_summary() or {}).get("intervals")


def cmd_report(args: argparse.Namespace) -> None:
    """`fpt report DIR`: write a self-contained HTML page for a run or a sweep directory and print its path."""
    from fpt.experiments.report import write_report

    print(write_report(args.directory, args.out))
