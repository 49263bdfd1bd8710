"""The `ktune` command that `pip install ./python` puts on PATH: `ktune plot`
is this package's (matplotlib figures, plot.py); every other subcommand is
the C program's (sweep, tune, show, ...), run as it is (tuning.cli_path
finds it: $KTUNE_CLI, the copy inside this package, beside libktune, PATH)."""
import os
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "plot":
        from .plot import main as plot_main
        return plot_main(argv[1:])
    from .tuning import cli_path
    try:
        exe = cli_path()
    except FileNotFoundError as e:
        print(f"ktune: {e}", file=sys.stderr)
        return 2
    if argv[:1] in (["help"], ["--help"], ["-h"], []):
        print("ktune plot CSV... [-o DIR]   figures of bench CSVs (this package; 'ktune plot --help')",
              file=sys.stderr)
    os.execv(exe, [exe] + argv)


if __name__ == "__main__":
    sys.exit(main())
