"""`intune-flow probe` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("probe", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow probe: not implemented yet") or 1)
