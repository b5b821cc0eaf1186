"""One tf.data service worker process: ``python -m intune_flow.scaleout.worker --dispatcher HOST:PORT``.

Started by :class:`~intune_flow.scaleout.pools.LocalProcessPool`. Before TensorFlow loads it
asks the kernel to kill it when its parent dies (``PR_SET_PDEATHSIG``), pins itself to
``--cores`` (``sched_setaffinity``, so TensorFlow sizes its thread pools to its share), then
starts a ``WorkerServer``; its constructor returns once the first heartbeat reached the
dispatcher, so writing ``--ready-file`` (JSON: pid, address, port) means "registered".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None) -> None:
    """SIGKILL this process when the thread that started it exits (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(0)         # the parent died before the prctl took effect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intune_flow.scaleout.worker")
    parser.add_argument("--dispatcher", required=True, help="host:port of the DispatchServer")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--host", default="127.0.0.1", help="the address the trainer reaches")
    parser.add_argument("--cores", default="", help="comma-separated CPUs to pin to")
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--ready-file", default=None)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    args = parser.parse_args(argv)

    die_with_parent(args.parent_pid)
    if args.cores:
        os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    service = tf.data.experimental.service
    worker = service.WorkerServer(service.WorkerConfig(
        dispatcher_address=args.dispatcher, worker_address=f"{args.host}:%port%",
        port=args.port, heartbeat_interval_ms=args.heartbeat_ms))
    port = int(worker._address.rsplit(":", 1)[1])
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "address": f"{args.host}:{port}", "port": port,
                       "cores": sorted(os.sched_getaffinity(0))}, f)
        os.replace(tmp, args.ready_file)
    print(f"intune-flow worker {os.getpid()} registered at {args.host}:{port}", flush=True)
    worker.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
