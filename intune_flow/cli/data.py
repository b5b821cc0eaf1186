"""``intune-flow data generate``: write Criteo-shaped demo data (TFRecord and/or Parquet)."""

from __future__ import annotations

import json


def register(sub):
    p = sub.add_parser("data", help="generate Criteo-shaped demo data")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    g = dsub.add_parser("generate", help="write sharded TFRecord/Parquet files and a manifest")
    g.add_argument("--out", required=True, help="directory to create (written atomically)")
    g.add_argument("--rows", type=int, default=65536, help="number of records (default 65536)")
    g.add_argument("--shards", type=int, default=8, help="files per format (default 8)")
    g.add_argument("--seed", type=int, default=0, help="random seed (same seed, same data)")
    g.add_argument("--format", default="tfrecord,parquet",
                   help="comma-separated: tfrecord, parquet (default both)")
    g.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    g.set_defaults(func=_generate)
    d = dsub.add_parser("default", help="print the files of the default dataset (generating it)")
    d.add_argument("--format", default="tfrecord", choices=("tfrecord", "parquet"))
    d.set_defaults(func=_default)


def _generate(args) -> int:
    from ..data import generate

    manifest = generate(args.out, rows=args.rows, shards=args.shards, seed=args.seed,
                        formats=args.format, overwrite=args.overwrite)
    summary = {k: manifest[k] for k in ("rows", "shards", "seed")}
    summary["files"] = {fmt: len(v) for fmt, v in manifest["files"].items()}
    print(f"wrote {args.out}: {json.dumps(summary)}")
    return 0


def _default(args) -> int:
    from ..data import default_dataset

    print("\n".join(default_dataset(args.format)))
    return 0
