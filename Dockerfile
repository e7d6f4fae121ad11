# One image for every service of docker-compose.yml (SuperLink, SuperNodes, CLI).
FROM python:3.11-slim
WORKDIR /app
# The CPU build of torch, pinned as in pyproject.toml: any other spec pulls CUDA.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY . /app
RUN pip install --no-cache-dir -e . && mkdir -p /flwr /results
ENV FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_HOME=/flwr FEDPRIV_DATA_DIR=/data
