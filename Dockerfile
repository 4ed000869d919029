# One image for web, worker, beat, migrate (and kubesim for docker-compose): the entrypoint picks the
# role (`python -m controlplane.entrypoint web|worker|beat|migrate|wait-for-migrations|manage ...`).
# deploy/kubernetes/ expects: user 10001 (numeric, so runAsNonRoot can be verified), port 8000, this
# entrypoint, a read-only root filesystem with /tmp writable. tests/deploy/test_image.py keeps them in step.

# --- build: dependencies from the exact pins in pyproject.toml, into a virtualenv ---
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
RUN pip install .
COPY . .
RUN DEBUG=true DATABASE_URL=postgres://build@localhost/build FIELD_ENCRYPTION_KEY=build \
    STATIC_ROOT=/src/staticfiles python manage.py collectstatic --noinput

# --- runtime: the virtualenv, the code and the collected static files, run as a non-root user ---
FROM python:3.11.14-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH \
    STATIC_ROOT=/app/staticfiles DATA_DIR=/tmp/controlplane
RUN groupadd --gid 10001 app && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin app \
    && mkdir /snapshot /spool && chown 10001:10001 /snapshot /spool
# /snapshot and /spool: the gateway's routing snapshot and usage spool in docker-compose, whose named volumes
# take this ownership when first mounted, so user 10001 can write them.
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --from=build --chown=root:root /src /app
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["python", "-m", "controlplane.entrypoint"]
CMD ["web"]
