"""Options shared by several commands (Annotated types), the parsing of their values, and the
patch that makes Typer's help conventional."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from adseg.cli.errors import CliError


def _conventional_help() -> None:
    """Typer's help (0.2x) prints a type beside every option: '<bool>' beside a flag, as if it
    took a value, and a run id's full range '[1<=x<=9223372036854775807]' (the databases' BIGINT,
    which nobody reaches). Here a flag shows no type and a bound at that limit is left out of the
    help; parsing and validation stay Typer's (the bound is still enforced). A Typer without
    these hooks keeps its own help."""
    import typer.core

    option = getattr(typer.core, "TyperOption", None)
    type_of = getattr(option, "display_type_rich", None)
    range_of = getattr(option, "_get_number_range_help_str", None)
    describe = getattr(typer.core, "describe_number_range", None)
    if type_of is not None:

        def display_type_rich(self, *args, **kwargs):
            if getattr(self, "is_bool_flag", False):
                return None
            return type_of(self, *args, **kwargs)

        option.display_type_rich = display_type_rich
    if range_of is not None and describe is not None:

        def number_range_help(self, *args, **kwargs):
            if getattr(self, "max", None) == RUN_ID["max"]:
                return describe(self.min, None)
            return range_of(self, *args, **kwargs)

        option._get_number_range_help_str = number_range_help


DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="ADSEG_DATABASE_URL",
        help="SQLAlchemy URL (default: sqlite:///adseg.db in the working directory).",
        show_envvar=True,
    ),
]
Quiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print errors and warnings only: no progress, no results."),
]
MinSamples = Annotated[
    int,
    typer.Option(help="Fewer samples than this: left out of a KS view (label -1).", min=1),
]
KsPartners = Annotated[
    int,
    typer.Option(
        "--ks-partners",
        help="KS views of 5,000 advertisers or more compare each advertiser with about this "
        "many random others, not with all (0: all pairs at any size; docs/algorithms/ks.md).",
        min=0,
    ),
]
RUN_ID = {"min": 1, "max": 2**63 - 1}  # the databases' BIGINT range (larger cannot be bound)
_conventional_help()
# numpy and scikit-learn take seeds in [0, 2**32); checked here, before a run row is written
Seed = Annotated[int, typer.Option(help="Seed of every random step.", min=0, max=2**32 - 1)]
Supply = Annotated[
    str,
    typer.Option(
        help="Supply behind the forecasts: actual (the window's bid requests, as the paper), "
        "forecast (from the training window) or both."
    ),
]
SupplyModel = Annotated[
    str,
    typer.Option(
        help="Forecast supply by ses (simple exponential smoothing), mean (of the training "
        "days) or seasonal_naive (the same weekday's latest day); pick by backtest."
    ),
]
SupplyEngine = Annotated[
    str,
    typer.Option(
        help="Fit SES with numpy (all advertisers at once, the default) or statsmodels "
        "(SimpleExpSmoothing per advertiser, ~4 ms each; the same model)."
    ),
]
SpendPrice = Annotated[
    str,
    typer.Option(
        help="Expected paid eCPM from the cost samples (the paper's eCPM cost c.d.f.) or the "
        "market prices (E[price | price <= bid], not censored by each advertiser's own bid)."
    ),
]


RunSeed = Annotated[
    int | None,
    typer.Option(
        help="Seed of every random step (default: the run's own seed).", min=0, max=2**32 - 1
    ),
]


def _forecast_options(**options: str) -> dict[str, str]:
    """``options`` (names of :data:`adseg.forecast.FORECAST_CHOICES`) checked at the door, before
    a run is made: CliError naming the option (``--supply-model``) and its choices."""
    from adseg.forecast import FORECAST_CHOICES

    for name, value in options.items():
        choices = FORECAST_CHOICES[name]
        if value not in choices:
            raise CliError(
                f"--{name.replace('_', '-')} must be {', '.join(choices[:-1])} or "
                f"{choices[-1]}; got {value!r}"
            )
    return options


FuserOption = Annotated[
    list[str] | None,
    typer.Option(
        "--fuser-option",
        metavar="FUSER.PARAM=VALUE",
        help="A fuser's parameter (repeatable), e.g. rcc.normalize=true (rcc's normalised form "
        'alone: half its default\'s time). VALUE is JSON (true, 1e-5, "l1") or else text.',
    ),
]
Scheduler = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        envvar="ADSEG_DASK_SCHEDULER",
        show_envvar=True,
        help="Run the fusers on the dask.distributed scheduler at ADDRESS (tcp://host:8786); "
        "default: worker processes on this machine.",
    ),
]


def _check_scheduler(address: str | None) -> None:
    """Exit 75 with one line (SchedulerUnreachable, mapped by handle_errors) unless the
    scheduler at ``address`` answers; nothing without one. Before the run: its lock not taken."""
    if address:
        from adseg.app.execution import check_scheduler

        check_scheduler(address)


def _fuser_options(texts: list[str] | None) -> dict[str, dict]:
    """``--fuser-option FUSER.PARAM=VALUE`` values as {fuser: {parameter: value}}, checked by
    :func:`adseg.consensus.check_fuser_options` before any work; CliError naming the option.
    VALUE is read as JSON where it parses (true/True, 3, 1e-5, [0.1, 1]), else kept as text."""
    from adseg.consensus import check_fuser_options

    options: dict[str, dict] = {}
    for text in texts or []:
        name, dot, rest = text.partition(".")
        param, equals, value = rest.partition("=")
        if not (dot and equals and name.strip() and param.strip()):
            raise CliError(
                f"--fuser-option must be FUSER.PARAM=VALUE, e.g. rcc.normalize=true; got {text!r}"
            )
        options.setdefault(name.strip(), {})[param.strip()] = _option_value(value)
    try:
        return check_fuser_options(options)
    except ValueError as exc:
        raise CliError(f"--fuser-option: {exc}") from None


_OPTION_WORDS = {"true": True, "false": False, "none": None}


def _option_value(text: str):
    """A ``--fuser-option`` VALUE: true/false/none in any case, else JSON, else the text."""
    import json

    word = text.strip().lower()
    if word in _OPTION_WORDS:
        return _OPTION_WORDS[word]
    try:
        return json.loads(text)
    except ValueError:
        return text


_WINDOWS_HELP = (
    "Give all four window dates or none (default: the last 14 days in the database, 7 + 7; "
    "fewer days are split in half)."
)


def _date_option(what: str):
    return Annotated[
        dt.datetime | None, typer.Option(formats=["%Y-%m-%d"], help=f"{what}. {_WINDOWS_HELP}")
    ]


TrainStart = _date_option("First day of the training window")
TrainEnd = _date_option("Last day of the training window")
EvalStart = _date_option("First day of the evaluation window")
EvalEnd = _date_option("Last day of the evaluation window")
