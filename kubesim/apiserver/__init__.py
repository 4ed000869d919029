"""The Kubernetes API server half of kubesim: storage, watch, apply, discovery and the HTTP handlers."""
