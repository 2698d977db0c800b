# One image for every ETT service (web, worker, beat, collector). torch is not in it:
# trainers install the `trainer` extra on their own images.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=ettweb.settings.production

WORKDIR /app
COPY pyproject.toml README.md ./
COPY ettweb ./ettweb
COPY collector ./collector
COPY trainer ./trainer
COPY bench ./bench
COPY manage.py ./
RUN pip install --no-cache-dir . \
 && DJANGO_SECRET_KEY=build-only DJANGO_ALLOWED_HOSTS=localhost \
    DATABASE_URL=postgres://build@localhost/build CELERY_BROKER_URL=redis://localhost:6379/0 \
    python manage.py collectstatic --noinput

# A fresh named volume takes the owner and mode of the image's directory at its mount point:
# without these the collector (uid 1000) could not write its state into /spool, nor
# collector-credential its secret into /credentials (docker-compose.yml).
RUN useradd --system --uid 1000 ett \
 && install -d -o ett -g ett -m 0755 /spool \
 && install -d -o ett -g ett -m 0700 /credentials
USER ett
EXPOSE 8000
CMD ["gunicorn", "ettweb.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
