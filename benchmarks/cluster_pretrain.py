"""Pretrain the cluster agent (InTuneX) in the cluster simulator and ship it.

    python -m benchmarks.cluster_pretrain                 # 12000 decisions, seed 0, ~5 CPU-min
    python -m benchmarks.cluster_pretrain --steps 2000 --out /tmp/c.safetensors --log-dir /tmp/c

Writes the policy (safetensors, default intune_flow/policies/cluster.safetensors)
with its provenance JSON, and under --log-dir (default benchmarks/pretrain/) the
curve (cluster_curve.json, cluster_curve.png) and the console log
(cluster_pretrain_log.txt).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "intune_flow" / "policies" / "cluster.safetensors"
DEFAULT_LOG_DIR = ROOT / "benchmarks" / "pretrain"


def plot_curve(hist, path: Path, title: str) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for ys, what, marker in ((hist.eval_ratio, "median", "o"), (hist.eval_p90, "p90", ".")):
        ax.plot(hist.steps, ys, marker=marker, label=f"held-out {what} cost / oracle")
    ax.axhline(1.05, color="k", lw=0.8, ls="--")
    ax.set(xlabel="agent decisions", ylabel="cost per record / oracle's", title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=12_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pool", type=int, default=150, help="training jobs (pipelines) in the pool")
    ap.add_argument("--eval-every", type=int, default=2000)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--log-dir", default=str(DEFAULT_LOG_DIR))
    args = ap.parse_args(argv)
    from intune_flow.scaleout.policy_io import save_cluster_policy
    from intune_flow.scaleout.pretrain import pretrain_cluster

    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "cluster_pretrain_log.txt"
    command = "python -m benchmarks.cluster_pretrain " + " ".join(
        argv if argv is not None else sys.argv[1:])
    log_file = log_path.open("w")

    def log(msg: str) -> None:
        print(msg, flush=True)
        print(msg, file=log_file, flush=True)

    log(f"$ {command.strip()}")
    t0 = time.time()
    agent, hist = pretrain_cluster(args.steps, args.seed, pool=args.pool,
                                   eval_every=args.eval_every, log=log)
    seconds = time.time() - t0
    save_cluster_policy(agent.state(), args.out, {
        "command": command.strip(), "seed": args.seed, "steps": args.steps, "pool": args.pool,
        "updates": agent.updates, "train_seconds": round(seconds, 1),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "held_out_median_cost_over_oracle": round(hist.eval_ratio[-1], 4),
        "held_out_p90_cost_over_oracle": round(hist.eval_p90[-1], 4),
        "dqn": dict(vars(agent.cfg))})
    (log_dir / "cluster_curve.json").write_text(json.dumps(vars(hist), indent=1) + "\n")
    plot_curve(hist, log_dir / "cluster_curve.png", f"cluster agent pretraining, seed {args.seed}")
    log(f"wrote {args.out} (+ .json), {log_dir / 'cluster_curve.png'} in {seconds:.0f}s")
    log_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
