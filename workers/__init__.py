"""Celery tasks and the code that talks to clusters: the only package that calls the Kubernetes API."""
