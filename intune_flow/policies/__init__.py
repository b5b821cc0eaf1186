"""The pretrained policy shipped with intune_flow (safetensors + provenance JSON)."""
