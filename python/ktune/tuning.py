"""Tuning from Python.  The C API has no tuning entry point (tuning runs in
worker processes that the `ktune` command manages), so tune() and sweep()
run that command, on the database the runtime reads (context.set_db_path),
then close the open contexts so the next call dispatches on the new results.

The command is found in this order: $KTUNE_CLI; the one `pip install ./python`
put inside this package (ktune/bin/ktune); one beside the loaded libktune
(build/ktune, or ../bin/ktune of an installed prefix); a `ktune` executable on
PATH that is the C program (not this package's own `ktune` script)."""
import json
import os
import subprocess
import tempfile

from . import contexts as context


class CommandError(RuntimeError):
    """The `ktune` command failed: `returncode` (1: failure, 2: bad usage or no
    GPU where one is needed), `output` (what it printed)."""

    def __init__(self, argv, returncode, output):
        self.argv, self.returncode, self.output = argv, returncode, output
        tail = output.strip().splitlines()[-3:]
        super().__init__(f"{' '.join(argv)} exited with {returncode}: " + " / ".join(tail))


def _is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def cli_path():
    """The path of the `ktune` command (see the module's docstring), or raise
    FileNotFoundError naming where it looked."""
    env = os.environ.get("KTUNE_CLI")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    tried = [os.path.join(here, "bin", "ktune")]
    try:
        from ._lib import library
        libdir = os.path.dirname(os.path.abspath(library().path))
        tried += [os.path.join(libdir, "ktune"), os.path.join(libdir, os.pardir, "bin", "ktune")]
    except ImportError:
        pass
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d:
            tried.append(os.path.join(d, "ktune"))
    for p in tried:
        if os.access(p, os.X_OK) and _is_elf(p):
            return os.path.normpath(p)
    raise FileNotFoundError("the ktune command was not found; set KTUNE_CLI to its path. Tried: " + ", ".join(tried))


def run(args, check=True, echo=False):
    """Runs `ktune ARGS...` (with --db of set_db_path when one is set and
    ARGS name none) and returns what it printed.  CommandError on a non-zero
    exit when `check`."""
    argv = [cli_path()] + [str(a) for a in args]
    db = context.db_path()
    if db is not None and "--db" not in argv and len(argv) > 1:
        argv[2:2] = ["--db", db]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if echo:
        print(p.stdout, end="")
    if check and p.returncode != 0:
        raise CommandError(argv, p.returncode, p.stdout)
    return p.stdout


def _fields(kw):
    out = []
    for k, v in kw.items():
        if v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        out += [flag] if v is True else [flag, v]
    return out


def _parse(text):
    """The 'name: value' lines of ktune tune's report as a dict."""
    rep = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name and " " not in name.strip() and name == name.lstrip():
            rep[name.strip()] = value.strip()
    return rep


def tune(op, *, device=None, echo=False, **fields):
    """Tunes one key of `op` ('gemm', 'gelu', ...) with `ktune tune OP
    --FIELD VALUE...` and returns its report as a dict ('key', 'config',
    'time', ...; 'output' holds the whole text).  Fields as `ktune help tune`
    lists them: tune('gemm', m=16, n=4096, k=4096, dtype='bf16',
    layout='nt'); tune('gelu', approx='tanh', n=1 << 24); options too
    (budget=64, retry_failed=True)."""
    args = ["tune", op] + (["--device", device] if device is not None else []) + _fields(fields)
    text = run(args, echo=echo)
    context.close()
    rep = _parse(text)
    rep["output"] = text
    return rep


def sweep(spec=None, *, device=None, echo=False, **options):
    """Tunes every key of `spec` with `ktune sweep`: None (the built-in
    suite), a path to a spec file, or a dict in the spec's format (`ktune
    help sweep`), e.g. {"gemm": {"dtypes": ["bf16"], "layouts": ["nt"],
    "shapes": [{"m": [16], "n": 4096, "k": 4096}]}}.  Options as the
    command's: budget=64, force=True, devices="0,1".  Returns its output."""
    tmp = None
    try:
        if isinstance(spec, dict):
            # JSON is YAML's flow style: the spec parser reads it as it is
            fd, tmp = tempfile.mkstemp(suffix=".yaml", prefix="ktune-spec-")
            with os.fdopen(fd, "w") as f:
                json.dump(spec, f)
            spec = tmp
        args = ["sweep"] + ([os.fspath(spec)] if spec is not None else [])
        args += (["--device", device] if device is not None else []) + _fields(options)
        text = run(args, echo=echo)
    finally:
        if tmp:
            os.unlink(tmp)
    context.close()
    return text


def last_dispatch(device=0):
    """What served the last call on this thread: "exact", "arch", "shipped",
    "nearest", "model", "cublas" or "default" (ktune_last_dispatch)."""
    from ._lib import library
    return library().last_dispatch(context.context(device)).decode()


__all__ = ["tune", "sweep", "run", "cli_path", "last_dispatch", "CommandError"]
