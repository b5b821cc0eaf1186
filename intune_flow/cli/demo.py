"""``intune-flow demo``: the nightly retraining flow, twice: night 1 tunes, night 2 hits the cache.

Runs ``flows/nightly_retrain.py`` (or ``nightly_retrain_torch.py`` with ``--torch``) as two
local Metaflow runs in subprocesses, then prints their summaries side by side, read from
the runs' ``summary`` artifacts with the Metaflow Client.

Local Metaflow defaults are filled in when unset (user name, local datastore and metadata,
all of Metaflow's files under ``<user cache dir>/intune_flow/demo``), so the demo writes
nothing to ``$HOME`` outside that cache directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..errors import IntuneError
from ..homes import fill_unset, library_homes

FLOWS = {False: ("nightly_retrain.py", "NightlyRetrainFlow"),
         True: ("nightly_retrain_torch.py", "NightlyRetrainTorchFlow")}


class DemoError(IntuneError):
    """The demo could not find or run the nightly flow."""


def register(sub):
    p = sub.add_parser(
        "demo", help="run the nightly retraining flow twice: night 1 tunes, night 2 uses the cache",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--budget-s", type=float, default=30.0,
                   help="tuning budget of night 1, in seconds (default 30)")
    p.add_argument("--steps", type=int, default=200, help="DLRM training steps per night (default 200)")
    p.add_argument("--torch", action="store_true",
                   help="use the torchdata pipeline (examples.criteo_torch) instead of tf.data")
    p.add_argument("--workers", default=None, metavar="SPEC",
                   help='a scale-out night: tune and train on tf.data service workers, e.g. '
                        '"local:2x1" (night 1 picks how many, night 2 starts them from the cache)')
    p.add_argument("--home", default=None,
                   help="where Metaflow's files and the demo's policy cache go "
                        "(default: <user cache dir>/intune_flow/demo)")
    p.add_argument("--keep-cache", action="store_true",
                   help="keep the demo's policy cache from earlier demos (night 1 is then warm too)")
    p.set_defaults(func=_demo)


def demo_home(home: str | None = None) -> Path:
    if home:
        return Path(home).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_cache_dir("intune_flow")) / "demo"


def demo_env(home: Path, environ: dict | None = None) -> tuple[dict, Path | None]:
    """The environment of the runs: the caller's, plus local Metaflow defaults where unset.

    Returns ``(env, demo_cache)``; ``demo_cache`` is the policy cache the demo owns (and may
    empty), or None when ``$INTUNE_FLOW_CACHE`` names the user's own.
    """
    env = dict(os.environ if environ is None else environ)
    defaults = {
        "USERNAME": env.get("USER") or "intune-demo",
        "METAFLOW_DEFAULT_DATASTORE": "local",
        "METAFLOW_DEFAULT_METADATA": "local",
        "METAFLOW_HOME": str(home / "metaflow_home"),
        "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(home / "metaflow"),
        "METAFLOW_CLIENT_CACHE_PATH": str(home / "metaflow_client"),
        "METAFLOW_CARD_LOCALROOT": str(home / "metaflow" / "mf.cards"),
        **library_homes(home),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    fill_unset(env, defaults)
    demo_cache = None
    if not env.get("INTUNE_FLOW_CACHE"):
        demo_cache = home / "policy-cache"
        env["INTUNE_FLOW_CACHE"] = str(demo_cache)
    return env, demo_cache


def flow_file(torch: bool) -> tuple[Path, str]:
    """The nightly flow of this checkout (flows/ sits next to the intune_flow package)."""
    name, cls = FLOWS[torch]
    path = Path(__file__).resolve().parents[2] / "flows" / name
    if not path.exists():
        raise DemoError(f"cannot find {path}: the demo runs the flows of a source checkout; "
                        "install intune_flow from its repository (pip install -e .) and retry")
    return path, cls


def run_night(path: Path, label: str, env: dict, args, run_id_file: Path) -> tuple[str, float]:
    cmd = [sys.executable, str(path), "run", "--tune_budget_s", str(args.budget_s),
           "--train_steps", str(args.steps), "--run-id-file", str(run_id_file)]
    if getattr(args, "workers", None):
        cmd[3:3] = ["--workers", args.workers]
    print(f"\n=== {label}: {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=path.parents[1])
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise DemoError(f"{label} failed (exit {proc.returncode}); its output is above")
    return run_id_file.read_text().strip(), seconds


def read_summary(flow_name: str, run_id: str, env: dict) -> dict:
    """The ``summary`` artifact of one run, via the Metaflow Client in a subprocess (so this
    process does not import Metaflow with the caller's configuration)."""
    code = ("import json, sys\nfrom metaflow import Run, namespace\nnamespace(None)\n"
            "print(json.dumps(Run(sys.argv[1]).data.summary))\n")
    proc = subprocess.run([sys.executable, "-c", code, f"{flow_name}/{run_id}"], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise DemoError(f"could not read the summary of {flow_name}/{run_id}: {proc.stderr.strip()}")
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _demo(args) -> int:
    from ..metaflow.summary import format_side_by_side

    if args.budget_s < 0 or args.steps < 1:
        raise DemoError("--budget-s must be >= 0 and --steps >= 1")
    if args.workers:
        from ..options import coerce

        args.workers = coerce("workers", args.workers, where="--workers")
        if args.torch:
            raise DemoError("--workers runs tf.data on tf.data service workers; drop --torch")
    path, flow_name = flow_file(args.torch)
    home = demo_home(args.home)
    home.mkdir(parents=True, exist_ok=True)
    env, demo_cache = demo_env(home)
    if demo_cache is not None and not args.keep_cache:
        shutil.rmtree(demo_cache, ignore_errors=True)  # the demo's own cache: night 1 starts cold
    print(f"intune-flow demo: {flow_name}, Metaflow files under {home}, "
          f"policy cache {env['INTUNE_FLOW_CACHE']}")

    columns = {}
    for night, label in ((1, "night 1 (cold)"), (2, "night 2 (warm)")):
        run_id, seconds = run_night(path, label, env, args, home / f"run-id-{night}")
        summary = read_summary(flow_name, run_id, env)
        summary["flow_seconds"] = seconds
        summary["run"] = f"{flow_name}/{run_id}"
        columns[label] = summary

    print("\n" + format_side_by_side(columns, extra=(("flow_seconds", "flow wall seconds", "{:.1f}"),
                                                     ("run", "Metaflow run", "{}"))))
    cold, warm = columns["night 1 (cold)"], columns["night 2 (warm)"]
    took = (f"tuning took {warm.get('tuning_seconds') or 0:.1f} s instead of "
            f"{cold.get('tuning_seconds') or 0:.1f} s")
    if warm.get("tuning_source") == "cache":
        print(f"\nNight 2 reused night 1's config from the cache: {took}.")
    elif warm.get("tuning_source") == "refined":
        print(f"\nNight 2 found night 1's record but measured its config slower "
              f"({warm.get('tuning_reason')}), so it refined it from the cached policy: {took}.")
    for label, summary in columns.items():
        html = home / "cards" / f"{summary['run'].replace('/', '-')}-intune.html"
        if save_card(path, summary["run"], html, env):
            print(f"{label}: tuning card {html}")
    return 0


def save_card(path: Path, run: str, out: Path, env: dict) -> bool:
    """Write the ``intune`` card of the run's ``train`` step as HTML (``card get``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, str(path), "card", "get", f"{run.split('/')[1]}/train",
                           "--id", "intune", str(out)], env=env, cwd=path.parents[1],
                          capture_output=True, text=True)
    return proc.returncode == 0 and out.exists()
