"""`adseg sample generate`: the simulated sample marketplace."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer

from adseg.cli.console import out
from adseg.cli.errors import CliError, handle_errors
from adseg.cli.options import Quiet

sample_app = typer.Typer(help="The simulated sample marketplace.", no_args_is_help=True)


_SAMPLE_OPTIONS = {
    "n_advertisers": "--advertisers",
    "days": "--days",
    "train_days": "--train-days",
    "n_segments": "--segments",
    "seed": "--seed",
}


def _option_names(message: str, options: dict[str, str]) -> str:
    """Rewrite a library message for a CLI user: its field names become the option names and a
    leading 'ClassName: ' goes."""
    message = re.sub(r"^\w+Config: ", "", message)
    return re.sub(r"\b(" + "|".join(options) + r")\b", lambda m: options[m.group(1)], message)


@sample_app.command("generate")
@handle_errors
def sample_generate(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the files into.")],
    family: Annotated[
        str,
        typer.Option(
            help="Generative family: 'default' (log-normal prices) or 'gamma' (gamma prices, "
            "flatter segment structure, noisier text; sample_campaigns/README.md). The options "
            "given override its values."
        ),
    ] = "default",
    advertisers: Annotated[
        int | None, typer.Option(help="Number of advertisers (default: the family's, 1268).")
    ] = None,
    days: Annotated[int, typer.Option(help="Days in all (training + evaluation).")] = 14,
    train_days: Annotated[
        int | None,
        typer.Option(help="Days of the training window (default: half of --days, rounded up)."),
    ] = None,
    segments: Annotated[
        int | None,
        typer.Option(
            help="Latent segments (default: the family's, 40, or --advertisers if fewer)."
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(help="Random seed (same seed → identical files; default 20260302)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write into a folder that is not empty (replacing the files named alike).",
        ),
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Write a simulated marketplace (advertisers, auctions, delivery .csv.gz, truth.csv and
    the config.json it was made with)."""
    import time

    from adseg.simulate import FAMILIES, family_config, simulate_marketplace, write_marketplace

    if family not in FAMILIES:
        raise CliError(f"--family must be one of {', '.join(FAMILIES)}; got {family!r}.")
    preset = family_config(family)
    if advertisers is None:
        advertisers = preset.n_advertisers
    _check_out_folder(out_dir, advertisers, segments, force)
    try:
        config = family_config(
            family,
            n_advertisers=advertisers,
            days=days,
            # the nightly's default windows split the data's days in half (train first)
            train_days=train_days if train_days is not None else (days + 1) // 2,
            n_segments=(
                segments if segments is not None else min(preset.n_segments, max(advertisers, 1))
            ),
            seed=seed if seed is not None else preset.seed,
        )
    except ValueError as exc:  # name the command's options, not the config's fields
        raise CliError(_option_names(str(exc), _SAMPLE_OPTIONS)) from None
    t0 = time.perf_counter()
    market = simulate_marketplace(config)
    paths = write_marketplace(market, out_dir)
    if not quiet:
        out.print(
            f"wrote {len(market.advertisers):,} advertisers, {market.n_auctions:,} auctions, "
            f"{len(market.delivery):,} delivery rows to {out_dir} "
            f"in {time.perf_counter() - t0:.1f} s",
            markup=False,
        )
        for name, path in paths.items():
            out.print(f"  {name}: {path}", markup=False)


def _check_out_folder(out_dir: Path, advertisers: int, segments: int | None, force: bool) -> None:
    """Refuse (CliError) an --out that is a file, more --segments than --advertisers, a folder
    that is not empty (without --force), or, with --force, one holding a table file that ingest
    would find beside the one written."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"--out {out_dir} is a file; give a folder to write the files into")
    if segments is not None and advertisers >= 1 and segments > advertisers:
        # config.json would record segments no advertiser could be drawn into
        raise CliError(f"--segments must be ≤ --advertisers ({advertisers}); got {segments}.")
    if not force and out_dir.is_dir() and (found := sorted(p.name for p in out_dir.iterdir())):
        # an inbox named by mistake would have its data replaced by simulated data, and files
        # left beside ours (advertisers.csv beside advertisers.csv.gz) make it fail to ingest
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise CliError(
            f"--out {out_dir} is not empty ({shown}): give a new or empty folder, or --force "
            "to write into it anyway"
        )
    if force and (clash := _other_table_forms(out_dir)):
        # ingest refuses a folder with two files for one table: the sample written beside
        # these could not be loaded from it
        them = "it" if len(clash) == 1 else "them"
        raise CliError(
            f"--out {out_dir} holds {', '.join(clash)}: beside the .csv.gz files written here, "
            f"ingest would find two files for one table; remove or move {them} first"
        )


def _other_table_forms(folder: Path) -> list[str]:
    """Names of the table files in ``folder`` in a form `sample generate` does not write
    (``advertisers.csv`` beside the ``advertisers.csv.gz`` it writes)."""
    from adseg.ingest import SUFFIXES, TABLES

    return [
        f"{table}{suffix}"
        for table in TABLES
        for suffix in SUFFIXES
        if suffix != ".csv.gz" and os.path.lexists(folder / f"{table}{suffix}")
    ]
