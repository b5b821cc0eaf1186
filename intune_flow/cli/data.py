"""`intune-flow data` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("data", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow data: not implemented yet") or 1)
