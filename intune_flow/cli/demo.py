"""`intune-flow demo` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("demo", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow demo: not implemented yet") or 1)
