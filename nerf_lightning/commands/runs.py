"""``nerf-lightning runs ROOT...``: the ledger of the recorded runs under some folders
(:mod:`nerf_lightning.runs.ledger`)."""

from __future__ import annotations

import sys

from jsonargparse import ArgumentParser

from nerf_lightning.commands.base import Command


def _declare(parser: ArgumentParser) -> None:
    """The options: the roots are one or more positional folders, which a typed signature cannot say."""
    parser.add_argument("roots", nargs="+", type=str, metavar="ROOT",
                        help="folders holding recorded runs (folders with run.json), searched to any depth; "
                             "a run folder itself works too.")
    parser.add_argument("--why", type=tuple[str, str] | None, default=None, metavar="A B",
                        help="say, one line per reason, why the test scores of runs A and B may or may not "
                             "be compared (a name of the table's run column, or a run folder), instead of "
                             "the table.")
    parser.add_argument("--csv", type=str | None, default=None,
                        help="also write the table into this CSV file (whole fingerprints and commits, an "
                             "empty cell for a value not recorded).")
    parser.add_argument("--plot", type=str | None, default=None,
                        help="also draw the runs' validation PSNR against training seconds into this PNG "
                             "file (needs matplotlib: pip install 'nerf-lightning[bench]').")


def runs(roots: list[str], why: tuple[str, str] | None = None, csv: str | None = None,
         plot: str | None = None) -> int:
    """List the recorded runs under some folders in comparability groups, each ranked by test PSNR.

    Per run: its date, status, sampler, key settings (field, max_time, max_steps, target_samples,
    learning rate), data fingerprint, steps, training time, test PSNR and SSIM of its newest test,
    samples per ray, code version and environment. Runs are in one group when they trained on the same
    data and their tests scored the same data, split, resolution, background and number of views; only
    then are their test scores ranked against each other. A run.json that cannot be read is one warning
    line and is left out. See docs/runs.md.
    """
    from nerf_lightning.runs import ledger as ledgers  # run records: imports Lightning
    from nerf_lightning.runs.curves import check_plotting

    if plot is not None:
        check_plotting()  # before any work: the one line, exit code 2
    ledger = ledgers.read_ledger(roots)
    for warning in ledger.warnings:
        print(f"nerf-lightning runs: warning: {warning}", file=sys.stderr)
    if why is not None:
        print("\n".join(ledgers.why(ledger.find(why[0]), ledger.find(why[1]))))
    else:
        print(ledgers.format_ledger(ledger))
    if csv is not None:
        print(f"table written to {ledgers.write_csv(ledger, csv)}")
    if plot is not None:
        for warning in ledgers.plot_ledger(ledger, plot):
            print(f"nerf-lightning runs: warning: {warning}", file=sys.stderr)
        print(f"plot written to {plot}")
    return 0


COMMAND = Command("runs", runs, positional=True, declare=_declare)
