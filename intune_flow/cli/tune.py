"""`intune-flow tune` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("tune", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow tune: not implemented yet") or 1)
