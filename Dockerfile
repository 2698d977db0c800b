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

RUN useradd --system --uid 1000 ett
USER ett
EXPOSE 8000
CMD ["gunicorn", "ettweb.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
