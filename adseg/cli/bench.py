"""`adseg bench consensus`: the paper's Table 2 protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from adseg.cli.console import err, out
from adseg.cli.errors import CliError, handle_errors
from adseg.cli.options import Quiet
from adseg.cli.output import _check_output, _write_atomic

bench_app = typer.Typer(help="Benchmarks on the shared benchmark data.", no_args_is_help=True)


@bench_app.command("consensus")
@handle_errors
def bench_consensus(
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="Data set(s) (default: Table 2's eight).")
    ] = None,
    repetitions: Annotated[int, typer.Option(help="Ensembles per data set.", min=1)] = 10,
    clusterings: Annotated[int, typer.Option(help="k-means runs per ensemble.", min=1)] = 40,
    preprocessing: Annotated[
        list[str] | None, typer.Option(help="raw and/or standardized (repeatable).")
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Base seed (repetition r uses seed + r).", min=0, max=2**32 - 1)
    ] = 0,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method",
            help="Fuser column(s) to run (repeatable; default all: KC, l2, rcc, their "
            "unnormalised forms, rcc (normalised), rcc (l1)).",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the markdown table here.")
    ] = None,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            "--datasets",
            metavar="DIR",
            help="The benchmark data folder (default: $ADSEG_DATASETS, else shared/datasets "
            "in or beside the working directory).",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """The paper's Table 2 protocol (seed 003): ACC of k-means, KC, l2 and rcc on the benchmark
    data sets (--datasets, $ADSEG_DATASETS or ../shared/datasets), items shuffled with recorded
    seeds."""
    from adseg_research.bench_table2 import (
        TABLE2_DATASETS,
        check_table2_name,
        default_methods,
        format_table2,
        run_table2,
    )
    from adseg_research.datasets import find_datasets_dir

    methods = default_methods()
    # every check before the first fit, so that a bad name after a good one fails at once, not
    # minutes in
    _check_choices(dataset, method, preprocessing, methods)
    if seed + repetitions - 1 > 2**32 - 1:
        raise CliError(
            f"--seed + --repetitions - 1 must be at most 2**32 - 1 (repetition r uses seed + r); "
            f"got {seed} + {repetitions} - 1"
        )
    data_dir = find_datasets_dir(datasets_dir)  # a clear error (exit 2) when the folder is missing
    names = dataset or list(TABLE2_DATASETS)
    for name in names:
        check_table2_name(name, data_dir)
    _check_output(output, "--output")
    progress = None if quiet else (lambda line: err.print(f"[dim]… {line}[/dim]"))
    with _one_blas_thread():
        frame = run_table2(
            names,
            n_repetitions=repetitions,
            n_clusterings=clusterings,
            seed=seed,
            preprocessing=preprocessing or ["raw"],
            methods={m: methods[m] for m in method} if method else methods,
            progress=progress,
            data_dir=data_dir,
        )
    table = format_table2(frame)
    if not quiet:
        out.print(table, markup=False)
    if output is not None:
        _write_atomic(output, table + "\n")


def _check_choices(
    dataset: list[str] | None,
    method: list[str] | None,
    preprocessing: list[str] | None,
    methods: dict,
) -> None:
    """CliError (exit 2) for a --method that is not a column of ``methods``, a --preprocessing
    other than raw / standardized, or a value given twice to a repeatable option."""
    from adseg_research.bench_table2 import PREPROCESSING

    if unknown := [m for m in method or [] if m not in methods]:
        raise CliError(
            f"--method {unknown[0]!r} is not a Table 2 column; choose from "
            + ", ".join(repr(m) for m in methods)
        )
    if unknown := [p for p in preprocessing or [] if p not in PREPROCESSING]:
        raise CliError(f"--preprocessing must be raw or standardized; got {unknown[0]!r}")
    for option, values in (
        ("--dataset", dataset),
        ("--method", method),
        ("--preprocessing", preprocessing),
    ):
        if values and (twice := sorted({v for v in values if values.count(v) > 1})):
            raise CliError(f"{option} {twice[0]!r} is given twice (its runs would be pooled)")


def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)
