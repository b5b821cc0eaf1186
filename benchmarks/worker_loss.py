"""What the tf.data service delivers when a worker dies mid-epoch, with and without a replacement.

    python -m benchmarks.worker_loss              # both modes, without and with supervise()
    python -m benchmarks.worker_loss --stall-s 30

Two local workers serve a finite 6000-record epoch (``Dataset.range`` with a TF-native
300 us delay per record); one worker is SIGKILLed after 500 records. Each run reads until
the epoch ends, no record came for ``--stall-s`` seconds, or a deadline, and reports the
records read, the distinct ones, the most copies of one, whether the epoch ended, and (with
``pool.supervise()``, as ``serve()`` runs it) how long each replacement took to start and
register.
Prints a Markdown table; docs/scaleout.md quotes it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections import Counter

N = 6000
KILL_AT = 500


def read_until(ds, stop_when, deadline_s: float, stall_s: float = 8.0):
    """Iterate ``ds`` in a thread until ``stop_when(seen)``, the end of the epoch, no new record
    for ``stall_s``, or the deadline: (seen, ended). A read left blocked is abandoned (the
    pool's stop ends it: its dispatcher goes away)."""
    seen, state = [], {"ended": False}

    def run():
        try:
            for x in ds.as_numpy_iterator():
                seen.append(int(x))
                if stop_when(seen):
                    return
            state["ended"] = True
        except Exception as exc:  # noqa: BLE001 - the dispatcher stopped under it
            state["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline, last, last_t = time.monotonic() + deadline_s, -1, time.monotonic()
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.2)
        if len(seen) != last:
            last, last_t = len(seen), time.monotonic()
        elif seen and time.monotonic() - last_t > stall_s:
            break
    return list(seen), state["ended"]


def run_mode(mode: str, *, replace: bool, stall_s: float, deadline_s: float) -> dict:
    """One kill in ``mode`` on a fresh pool of two workers; the counts described above."""
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import testing

    from intune_flow.scaleout.pools import LocalProcessPool

    with LocalProcessPool(max_workers=2) as pool:
        pool.start(2)
        pool.supervise(replace)
        victim = pool.worker_info[0].pid
        ds = tf.data.Dataset.range(N).apply(testing.sleep(300)).apply(
            tf.data.experimental.service.distribute(processing_mode=mode, service=pool.target))
        killed = {}

        def kill_once(seen):
            if len(seen) == KILL_AT and not killed:
                os.kill(victim, signal.SIGKILL)
                killed["t"] = time.monotonic()
            return False

        seen, ended = read_until(ds, kill_once, deadline_s, stall_s=stall_s)
        copies = Counter(seen)
        started = [r["started_s"] for r in pool.replacements]
    return {"mode": mode, "replacement": replace, "read": len(seen), "distinct": len(copies),
            "most_copies": max(copies.values(), default=0), "epoch_ended": ended,
            "replacements": started}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.worker_loss",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--stall-s", type=float, default=20.0,
                    help="stop reading after this long without a record")
    ap.add_argument("--deadline-s", type=float, default=180.0)
    args = ap.parse_args(argv)
    rows = [run_mode(mode, replace=replace, stall_s=args.stall_s, deadline_s=args.deadline_s)
            for replace in (False, True) for mode in ("parallel_epochs", "distributed_epoch")]
    print(f"`{' '.join(['python -m benchmarks.worker_loss', *(argv or sys.argv[1:])])}`")
    print(f"\nSIGKILL of one of two local workers after {KILL_AT} records of a {N}-record "
          f"epoch; read until the epoch ended or {args.stall_s:g} s without a record.\n")
    print("| mode | replacement | records read | distinct | most copies of one | "
          "epoch ended | replacements (start-up s) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| `{r['mode']}` | {'yes' if r['replacement'] else 'no'} | {r['read']} | "
              f"{r['distinct']} of {N} | {r['most_copies']} | {r['epoch_ended']} | "
              f"{', '.join(f'{x:.1f}' for x in r['replacements']) or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
