"""`intune-flow cache` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("cache", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow cache: not implemented yet") or 1)
