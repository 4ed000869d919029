# One image for web, worker, beat and kubesim (the command differs per compose service).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

RUN apt-get update && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md ./
RUN pip install --upgrade pip && pip install -e .
COPY . .
RUN pip install -e . \
    && DEBUG=true DATABASE_URL=postgres://build@localhost/build FIELD_ENCRYPTION_KEY=build \
       python manage.py collectstatic --noinput \
    && useradd --create-home --uid 10001 app && chown -R app /app
USER app

EXPOSE 8000
CMD ["gunicorn", "controlplane.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
