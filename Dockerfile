# The server image: REST (and later gRPC and workers) from one code base.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN useradd --create-home --uid 1000 modelhost && mkdir -p /data && chown modelhost /data
USER modelhost
ENV VAR_DIR=/data MODEL_STORE_DIR=/data/models
EXPOSE 8000 8001
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--http-port", "8000"]
