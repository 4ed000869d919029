"""The tenants' OpenAI-compatible front door (ASGI). It imports nothing of Django: it works from the
routing snapshot the control plane writes (apps.gateway.snapshot)."""
