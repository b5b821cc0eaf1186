"""``intune-flow pretrain``: train the policy in the simulator (taught by its oracle) and write it
with its provenance."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "policies" / "default.safetensors"


def register(sub):
    p = sub.add_parser("pretrain", help="pretrain the tuning policy on simulated pipelines",
                       description="Train the agent's Q-network over random simulated pipelines "
                                   "and machines (2-128 cores), regressing each visited state's "
                                   "moves onto the simulator's noise-free rewards; write the "
                                   "policy (safetensors), its "
                                   "provenance JSON, a training-curve PNG and the console log.")
    p.add_argument("--steps", type=int, default=45_000, help="oracle-taught states to train on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="policy file (.safetensors)")
    p.add_argument("--log-dir", default="benchmarks/pretrain",
                   help="where the training curve PNG and console output go")
    p.add_argument("--eval-every", type=int, default=5000)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.set_defaults(func=run)


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def plot_curve(hist, path: Path, title: str) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(hist.steps, hist.eval_ratio, marker="o", label="held-out median best/oracle")
    ax.plot(hist.steps, hist.eval_p10, marker=".", label="held-out p10 best/oracle")
    ax.set_xlabel("agent steps")
    ax.set_ylabel("throughput / oracle (40-step walks)")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args) -> int:
    from ..agent.policy_io import save_policy
    from ..agent.pretrain import pretrain

    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "pretrain_log.txt"
    command = "intune-flow pretrain " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["pretrain"]
                                                 else [f"--steps {args.steps}", f"--seed {args.seed}"])
    lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        lines.append(msg)
        log_path.write_text("\n".join(lines) + "\n")

    log(f"$ {command}")
    t0 = time.time()
    agent, hist = pretrain(args.steps, args.seed, eval_every=args.eval_every, log=log,
                           threads=args.threads)
    seconds = time.time() - t0
    provenance = {
        "command": command,
        "seed": args.seed,
        "steps": args.steps,
        "updates": agent.updates,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "train_seconds": round(seconds, 1),
        "held_out_median_best_over_oracle": round(hist.eval_ratio[-1], 4),
        "held_out_p10_best_over_oracle": round(hist.eval_p10[-1], 4),
        "hidden": agent.cfg.hidden,
        "dqn": {k: v for k, v in vars(agent.cfg).items()},
    }
    save_policy(agent.state(), args.out, provenance)
    (log_dir / "curve.json").write_text(json.dumps(vars(hist), indent=1) + "\n")
    plot_curve(hist, log_dir / "training_curve.png", f"pretraining, seed {args.seed}")
    log(f"wrote {args.out} (+ .json), {log_dir / 'training_curve.png'} in {seconds:.0f}s")
    return 0
