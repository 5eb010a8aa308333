"""`adseg bench consensus`: the paper's Table 2 protocol."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from adseg.cli.console import err, out
from adseg.cli.errors import CliError, handle_errors
from adseg.cli.options import Quiet
from adseg.cli.output import _check_output, _write_atomic

bench_app = typer.Typer(help="Benchmarks on the shared benchmark data.", no_args_is_help=True)


MethodOption = Annotated[
    list[str] | None,
    typer.Option(
        "--method",
        help="Fuser column(s) to run (repeatable; default: KC, l2, rcc, their "
        "unnormalised forms, rcc (normalised), rcc (l1), and with --peers-src PCE's four). "
        "Also adseg's trce, sccbg, rcec, lta and PCE's 'PCE TRCE', ECPCS-MC, LWEA, U-SENC.",
    ),
]

PeersSrcOption = Annotated[
    Path | None,
    typer.Option(
        "--peers-src",
        metavar="DIR",
        envvar="ADSEG_PCE_SRC",
        show_envvar=True,
        help="The src/ folder of a py-cluster-ensemble (PCE) checkout: adds its TRCE, "
        "ECPCS-MC, LWEA and U-SENC columns on the same base clusterings (loaded, not "
        "installed).",
    ),
]

TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="Per fit: a longer fit is stopped and recorded as a failure, and that "
        "method's later repetitions on the set as skipped (default: none).",
        min=1,
    ),
]

CsvOption = Annotated[
    Path | None,
    typer.Option("--csv", metavar="FILE", help="Also write one row per fit (CSV) here."),
]

OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Also write the markdown table here.")
]

DatasetsOption = Annotated[
    Path | None,
    typer.Option(
        "--datasets",
        metavar="DIR",
        help="The benchmark data folder (default: $ADSEG_DATASETS, else shared/datasets "
        "in or beside the working directory).",
    ),
]


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
    method: MethodOption = None,
    peers_src: PeersSrcOption = None,
    timeout: TimeoutOption = None,
    csv_output: CsvOption = None,
    output: OutputOption = None,
    datasets_dir: DatasetsOption = None,
    quiet: Quiet = False,
) -> None:
    """The paper's Table 2 protocol (seed 003): ACC, NMI, seconds and peak memory of k-means, KC,
    l2 and rcc (and of adseg's other fusers and PCE's peers when asked) on the benchmark data sets
    (--datasets, $ADSEG_DATASETS or ../shared/datasets), items shuffled with recorded seeds; each
    fit in a forked child process, failures recorded as rows."""
    from adseg_research.bench_table2 import (
        TABLE2_DATASETS,
        check_table2_name,
        format_table2_report,
        run_table2,
    )
    from adseg_research.datasets import find_datasets_dir

    # every check before the first fit, so that a bad name after a good one fails at once, not
    # minutes in
    methods = _columns(dataset, method, preprocessing, peers_src)
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
    _check_output(csv_output, "--csv")
    progress = None if quiet else (lambda line: err.print(f"[dim]… {line}[/dim]"))
    with _one_blas_thread():
        frame = run_table2(
            names,
            n_repetitions=repetitions,
            n_clusterings=clusterings,
            seed=seed,
            preprocessing=preprocessing or ["raw"],
            methods=methods,
            progress=progress,
            data_dir=data_dir,
            isolate=True,
            timeout=timeout,
        )
    table = format_table2_report(frame)
    if not quiet:
        out.print(table, markup=False)
    if output is not None:
        _write_atomic(output, table + "\n")
    if csv_output is not None:
        _write_atomic(csv_output, frame.to_csv(index=False))


def _columns(
    dataset: list[str] | None,
    method: list[str] | None,
    preprocessing: list[str] | None,
    peers_src: Path | None,
) -> dict:
    """The columns to run, name → factory: ``method``, else the default columns and, with
    ``peers_src``, PCE's four. CliError (exit 2) for a bad choice (``_check_choices``), a PCE
    column without ``peers_src``, or a ``peers_src`` that is not a PCE source tree or whose core
    does not import (one line naming the folder)."""
    from adseg_research.bench_table2 import all_methods, default_methods
    from adseg_research.peers import PCE_COLUMNS

    _check_choices(dataset, method, preprocessing, [*all_methods(), *PCE_COLUMNS])
    if peers_src is None and (asked := [m for m in method or [] if m in PCE_COLUMNS]):
        raise CliError(
            f"--method {asked[0]!r} is PCE's: give --peers-src DIR (or set $ADSEG_PCE_SRC) to "
            "the src/ folder of a py-cluster-ensemble checkout"
        )
    default = [*default_methods(), *(PCE_COLUMNS if peers_src is not None else [])]
    try:
        methods = all_methods(peers_src)
    except (OSError, ValueError) as exc:
        raise CliError(f"--peers-src: {exc}") from None
    except Exception as exc:  # a core that does not import: its error, with the folder
        text = f"{type(exc).__name__}: {exc}"
        raise CliError(f"--peers-src {peers_src}: PCE did not load: {text}") from None
    return {m: methods[m] for m in method or default}


def _check_choices(
    dataset: list[str] | None,
    method: list[str] | None,
    preprocessing: list[str] | None,
    methods: Iterable[str],
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
