"""`intune-flow pretrain` (placeholder until its issue lands)."""


def register(sub):
    p = sub.add_parser("pretrain", help="(not yet implemented)")
    p.set_defaults(func=lambda args: print("intune-flow pretrain: not implemented yet") or 1)
