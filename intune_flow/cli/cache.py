"""``intune-flow cache ls | show KEY | rm KEY | prune``: inspect and tidy any cache backend."""

from __future__ import annotations

import argparse
import json
import time


def register(sub):
    p = sub.add_parser("cache", help="list, show, remove or prune cached tuning records")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache", default=argparse.SUPPRESS, metavar="URI",
                        help="s3://BUCKET/PREFIX, a directory or memory:// "
                             "(default: $INTUNE_FLOW_CACHE or the user cache dir)")
    p.add_argument("--cache", default=None, metavar="URI", help=argparse.SUPPRESS)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("ls", parents=[common], help="a table of the records")
    ls.add_argument("--json", action="store_true", help="one JSON object per record")
    ls.set_defaults(func=_ls)
    show = actions.add_parser("show", parents=[common], help="one record in full (JSON)")
    show.add_argument("key", help="a key from `ls` (or a unique prefix of one)")
    show.set_defaults(func=_show)
    rm = actions.add_parser("rm", parents=[common], help="remove one record")
    rm.add_argument("key", help="a key from `ls` (or a unique prefix of one)")
    rm.set_defaults(func=_rm)
    prune = actions.add_parser("prune", parents=[common],
                               help="remove old records and/or quarantined copies")
    prune.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                       help="remove records (and quarantined copies) older than DAYS")
    prune.add_argument("--quarantined", action="store_true",
                       help="remove quarantined copies (with --older-than: only old ones)")
    prune.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
    prune.set_defaults(func=_prune)


def _cache(args):
    from ..cache import get_cache

    return get_cache(args.cache)


def age(seconds: float) -> str:
    """A short human age: 45s, 12m, 5h, 3d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _entries(cache, keys: list[str]):
    """(key, Record | None, problem | None) for each of ``keys``, read without side effects."""
    from ..cache.records import RecordError, decode

    out = []
    for key in keys:
        found = cache.get(key)
        if found is None:
            continue
        try:
            out.append((key, decode(found[0], expected_key=key), None))
        except RecordError as exc:
            out.append((key, None, str(exc)))
    return out


def record_keys(keys: list[str]) -> list[str]:
    """Those of ``keys`` (a cache's live keys) that are record keys
    (``v1/<schema>/<space>/<hardware>``).

    Objects under the prefix with other keys (another cache nested under this one, files
    of other tools) are not this cache's records: listing them as damaged would be wrong.
    """
    from ..cache.keys import CacheKey
    from ..errors import CacheError

    out = []
    for key in keys:
        try:
            CacheKey.parse(key)
        except CacheError:
            continue
        out.append(key)
    return out


def _resolve(cache, key: str) -> str:
    from ..errors import CacheError

    keys = record_keys(cache.records())
    if key in keys:
        return key
    matches = [k for k in keys if k.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CacheError(f"no record {key!r} in {cache.uri}; see `intune-flow cache ls`")
    raise CacheError(f"{key!r} matches {len(matches)} records in {cache.uri}; give more of the key")


def _config_text(config: dict, limit: int = 64) -> str:
    from .probe import format_config

    text = format_config(config)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ls(args) -> int:
    cache = _cache(args)
    live = cache.records()
    keys = record_keys(live)
    entries = _entries(cache, keys)
    quarantined = [k for k in cache.list() if ".quarantine/" in k]
    others = len(live) - len(keys)
    if args.json:
        for key, rec, problem in entries:
            row = {"key": key, "problem": problem}
            if rec is not None:
                row.update(schema=rec.key.schema, hardware=rec.key.hardware, config=rec.config,
                           throughput=rec.throughput, age_s=rec.age_s, pipeline=rec.pipeline,
                           method=rec.method, tuning_seconds=rec.tuning_seconds)
            print(json.dumps(row))
        return 0
    if not entries:
        root = getattr(cache, "root", None)
        missing = root is not None and not root.exists()
        print(f"no records in {cache.uri}" + (" (no such directory: check the path; tune() "
                                              "creates it on its first write)" if missing else ""))
    else:
        rows = [("SCHEMA", "HARDWARE", "CONFIG", "THROUGHPUT", "AGE", "PIPELINE", "KEY")]
        for key, rec, problem in entries:
            if rec is None:
                rows.append(("?", "?", f"DAMAGED: {problem}"[:48], "-", "-", "-", key))
            else:
                rows.append((rec.key.schema[:12], rec.key.hardware, _config_text(rec.config),
                             f"{rec.throughput:,.0f}/s", age(rec.age_s), rec.pipeline or "-", key))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    if quarantined:
        print(f"{len(quarantined)} quarantined record(s); remove with "
              "`intune-flow cache prune --quarantined`")
    if others > 0:
        print(f"{others} other object(s) under {cache.uri} are not records of this cache "
              "(another cache under a sub-prefix? list it by its own URI)")
    return 0


def _show(args) -> int:
    from ..cache.records import RecordError, decode

    cache = _cache(args)
    key = _resolve(cache, args.key)
    found = cache.get(key)
    if found is None:
        return _show_missing(key)
    try:
        doc = decode(found[0], expected_key=key).to_json()
    except RecordError as exc:
        print(json.dumps({"key": key, "problem": str(exc), "bytes": len(found[0])}, indent=1))
        return 1
    doc["age"] = age(time.time() - doc["created_at"])
    print(json.dumps(doc, indent=1, sort_keys=True))
    return 0


def _show_missing(key: str) -> int:
    print(f"record {key} disappeared while reading it")
    return 1


def _rm(args) -> int:
    cache = _cache(args)
    key = _resolve(cache, args.key)
    if cache.delete(key):
        print(f"removed {key}")
        return 0
    print(f"{key} was already gone")
    return 1


def _prune(args) -> int:
    from ..cache.util import stamp_time
    from ..errors import CacheError

    if args.older_than is None and not args.quarantined:
        raise CacheError("say what to prune: --older-than DAYS and/or --quarantined")
    if args.older_than is not None and args.older_than < 0:
        raise CacheError(f"--older-than must be >= 0 days, got {args.older_than}")
    cache = _cache(args)
    now = time.time()
    cutoff = None if args.older_than is None else now - args.older_than * 86400
    doomed = []
    if cutoff is not None:
        for key, rec, _ in _entries(cache, record_keys(cache.records())):
            if rec is not None and rec.created_at < cutoff:
                doomed.append(key)
    for key in cache.list():
        if ".quarantine/" not in key:
            continue
        when = stamp_time(key.rsplit("/", 1)[-1])
        if args.quarantined and (cutoff is None or (when is not None and when < cutoff)):
            doomed.append(key)
        elif cutoff is not None and when is not None and when < cutoff:
            doomed.append(key)
    for key in doomed:
        if args.dry_run:
            print(f"would remove {key}")
        elif cache.delete(key):
            print(f"removed {key}")
    print(f"{len(doomed)} object(s) {'to remove' if args.dry_run else 'removed'} from {cache.uri}")
    return 0
