"""kubesim: a simulated GPU cluster that speaks the Kubernetes HTTP API. Imports nothing of the project."""
