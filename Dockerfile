# The server image: REST, gRPC and CPU inference workers from one code base.
#   docker build -t modelhost .
# GPU workers have their own image, matched to onnxruntime-gpu's CUDA: Dockerfile.gpu.
ARG BASE=python:3.11-slim
# The web UI's browser libraries (package.json, as `make venv` installs them).
FROM node:22-slim AS ui
WORKDIR /ui
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts

FROM ${BASE}
ARG ONNXRUNTIME=onnxruntime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN if ! command -v python3.11 >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv curl \
      && rm -rf /var/lib/apt/lists/*; \
    else apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*; fi
RUN python3.11 -m venv /venv
ENV PATH=/venv/bin:$PATH
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
 && if [ "$ONNXRUNTIME" != "onnxruntime" ]; then \
      pip uninstall -y onnxruntime && pip install --no-cache-dir "$ONNXRUNTIME==$(grep -oP '^onnxruntime==\K.*' requirements.txt)"; fi
COPY . .
COPY --from=ui /ui/node_modules ./node_modules
RUN useradd --create-home --uid 1000 modelhost && mkdir -p /data /etc/modelhost/worker-tls \
 && chown modelhost /data /etc/modelhost/worker-tls
USER modelhost
ENV VAR_DIR=/data MODEL_STORE_DIR=/data/models WORKER_CACHE_DIR=/data/worker-cache
EXPOSE 8000 8001
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--http-port", "8000"]
