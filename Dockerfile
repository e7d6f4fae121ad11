# One image for every container of docker-compose.yml: the coordinator (SuperLink,
# ServerApp, `fedpriv coordinator ...`) and each hospital's node (`fedpriv node ...`).
#
# Build arguments:
#   BASE_IMAGE  any Debian-like image with Python 3.11 and its venv module:
#               python:3.11-slim from a registry (the default), or an image made from
#               Debian's packages with no registry at all (compose/base-image.sh makes
#               fedpriv-base:bookworm).
#   WHEELHOUSE  a folder of the build context holding every dependency as a wheel
#               (compose/wheelhouse.sh writes one): the build then needs no network.
#               Empty (the default): torch's CPU build from its own index, the rest
#               from PyPI.
#
#   docker build -t fedpriv:latest .
#   compose/base-image.sh && compose/wheelhouse.sh wheelhouse
#   docker build -t fedpriv:latest --build-arg BASE_IMAGE=fedpriv-base:bookworm \
#       --build-arg WHEELHOUSE=wheelhouse .
#
# The classic builder and BuildKit both build it (no RUN --mount): docker-compose
# 1.x builds through the Engine API.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG WHEELHOUSE=
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
# A venv: Debian's own python3 is "externally managed" (PEP 668), and the final
# stage copies this one folder.
RUN python3 -m venv /opt/venv
# The dependencies first, from pyproject.toml alone, so that a change of fedpriv's
# code reuses this layer. Without a wheelhouse the second source names
# pyproject.toml again (COPY cannot be conditional). From the network, torch comes
# from its CPU index first, pinned as in pyproject.toml: any other spec pulls CUDA.
COPY pyproject.toml ${WHEELHOUSE:-pyproject.toml} /deps/
RUN set -eu; \
    python -c 'import tomllib; d = tomllib.load(open("/deps/pyproject.toml", "rb")); \
print("\n".join(d["project"]["dependencies"] + d["build-system"]["requires"]))' \
        > /deps/requirements.txt; \
    if [ -n "${WHEELHOUSE}" ]; then \
        pip install --no-index --find-links /deps -r /deps/requirements.txt; \
    else \
        pip install "$(grep '^torch==' /deps/requirements.txt)" --index-url "${TORCH_INDEX}"; \
        pip install -r /deps/requirements.txt; \
    fi
# The package's folders only (pyproject.toml's package-dir): not the wheelhouse, docs
# or tests of the build context.
COPY pyproject.toml README.md /src/
COPY fedpriv /src/fedpriv
COPY server /src/server
COPY clients /src/clients
COPY strategies /src/strategies
COPY experiments /src/experiments
# Non-editable, from the venv's own setuptools: no network, no source tree kept.
RUN pip install --no-deps --no-build-isolation /src && fedpriv --help > /dev/null

FROM ${BASE_IMAGE}
COPY --from=build /opt/venv /opt/venv
RUN mkdir -p /flwr /results
ENV PATH=/opt/venv/bin:$PATH LANG=C.UTF-8 \
    FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_HOME=/flwr
WORKDIR /work
CMD ["fedpriv", "--help"]
