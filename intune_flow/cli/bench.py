"""`intune-flow bench` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("bench", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow bench: not implemented yet") or 1)
