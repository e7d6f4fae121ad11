# Shared steps of tests/containers/run.sh and two_machines.sh (sourced, not run):
# the tools, a Docker daemon, the base image, the wheelhouse, the fedpriv image.
# Each step says what it does and how long it took; cleanup() undoes what this run
# started, and only that.

export LC_ALL=C
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IMAGE=${FEDPRIV_IMAGE:-fedpriv:latest}
BASE_IMAGE=${BASE_IMAGE:-}
REGISTRY_BASE=python:3.11-slim
DEBIAN_BASE=fedpriv-base:bookworm
# A daemon of our own, if none answers: its own data root, socket and PID file.
OWN_ROOT=/var/lib/fedpriv-docker
OWN_EXEC=/run/fedpriv-docker
OWN_SOCK=unix://$OWN_EXEC/docker.sock
STARTED_DOCKERD=
INSTALL=
WHEELHOUSE=1
BUILD=1
KEEP=
CLEANUPS=()
T_START=$(date +%s)

say() { printf '[containers] %s\n' "$*"; }
fail() { printf '[containers] FAILED: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
secs() { if [ -n "$1" ]; then echo "$1 s"; else echo "$2"; fi; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

common_usage() {
    cat <<'EOF'
  --install          apt-get install the missing Debian packages (docker.io,
                     docker-compose, debootstrap, iproute2); without it, a missing
                     tool is named and the test stops
  --base-image IMG   build on IMG (default: python:3.11-slim if the daemon has or
                     can pull it, else fedpriv-base:bookworm from Debian packages)
  --no-wheelhouse    install the dependencies from the package indexes instead of
                     a wheelhouse of compose/wheelhouse.sh
  --no-build         use the image $FEDPRIV_IMAGE (fedpriv:latest) as it is
  --keep             keep the work folder (keys, ledgers, results) for a look
EOF
}

parse_common() {  # sets REST to what is not a common option
    REST=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --install) INSTALL=1 ;;
            --base-image) BASE_IMAGE=$2; shift ;;
            --no-wheelhouse) WHEELHOUSE= ;;
            --no-build) BUILD= ;;
            --keep) KEEP=1 ;;
            *) REST+=("$1") ;;
        esac
        shift
    done
}

on_exit() {
    local rc=$?
    local i
    for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${CLEANUPS[i]}" || true
    done
    if [ -n "$STARTED_DOCKERD" ]; then
        say "stopping the Docker daemon this test started (pid $STARTED_DOCKERD)"
        kill -TERM "$STARTED_DOCKERD" 2> /dev/null || true
        for _ in $(seq 60); do kill -0 "$STARTED_DOCKERD" 2> /dev/null || break; sleep 0.5; done
    fi
    say "wall time: $(( $(date +%s) - T_START )) s (exit $rc)"
    exit "$rc"
}
trap on_exit EXIT
set -E
trap 'say "failed: line $LINENO: $BASH_COMMAND"' ERR
trap 'exit 130' INT TERM

# -- tools --------------------------------------------------------------------
# tool -> Debian package
declare -A PACKAGE=([docker]=docker.io [dockerd]=docker.io [docker-compose]=docker-compose
                    [debootstrap]=debootstrap [ip]=iproute2 [python3]=python3 [tar]=tar)

need_tools() {  # need_tools TOOL...: all on PATH, else install (--install) or stop
    local missing=() t
    for t in "$@"; do command -v "$t" > /dev/null || missing+=("$t"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    local pkgs=() p
    for t in "${missing[@]}"; do p=${PACKAGE[$t]:-$t}; [[ " ${pkgs[*]} " == *" $p "* ]] || pkgs+=("$p"); done
    if [ -z "$INSTALL" ]; then
        fail "missing ${missing[*]}: install the Debian packages ${pkgs[*]} (or rerun with --install)"
    fi
    say "--install: apt-get install ${pkgs[*]} (for ${missing[*]})"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" \
        || fail "apt-get install ${pkgs[*]}"
}

compose_tool() {  # COMPOSE: docker-compose (1.x), else the `docker compose` plugin
    if command -v docker-compose > /dev/null; then
        COMPOSE=(docker-compose)
    elif docker compose version > /dev/null 2>&1; then
        COMPOSE=(docker compose)
    else
        need_tools docker-compose
        COMPOSE=(docker-compose)
    fi
}

# -- the daemon ---------------------------------------------------------------
ensure_dockerd() {
    need_tools docker
    if docker info > /dev/null 2>&1; then
        say "Docker daemon: the running one (${DOCKER_HOST:-default socket})"
        return 0
    fi
    if DOCKER_HOST=$OWN_SOCK docker info > /dev/null 2>&1; then
        export DOCKER_HOST=$OWN_SOCK
        say "Docker daemon: the running one at $OWN_SOCK"
        return 0
    fi
    need_tools dockerd
    [ "$(id -u)" = 0 ] || fail "no Docker daemon answers, and starting one needs root"
    mkdir -p "$OWN_ROOT" "$OWN_EXEC"
    local t0 log=$OWN_EXEC/dockerd.log
    t0=$(now)
    dockerd --data-root "$OWN_ROOT" --exec-root "$OWN_EXEC" --pidfile "$OWN_EXEC/dockerd.pid" \
        --host "$OWN_SOCK" > "$log" 2>&1 &
    STARTED_DOCKERD=$!
    export DOCKER_HOST=$OWN_SOCK
    for _ in $(seq 120); do
        docker info > /dev/null 2>&1 && break
        kill -0 "$STARTED_DOCKERD" 2> /dev/null || { tail -5 "$log" >&2; fail "dockerd exited"; }
        sleep 0.5
    done
    docker info > /dev/null 2>&1 || { tail -5 "$log" >&2; fail "dockerd did not answer in 60 s"; }
    DOCKERD_SECONDS=$(since "$t0")
    say "Docker daemon: started (pid $STARTED_DOCKERD, data root $OWN_ROOT) in ${DOCKERD_SECONDS} s"
}

# -- images -------------------------------------------------------------------
ensure_base_image() {  # BASE_IMAGE: given, the registry's, or one from Debian packages
    if [ -n "$BASE_IMAGE" ]; then
        docker image inspect "$BASE_IMAGE" > /dev/null 2>&1 \
            || docker pull "$BASE_IMAGE" > /dev/null || fail "base image $BASE_IMAGE: not found"
        say "base image: $BASE_IMAGE"
        return 0
    fi
    if docker image inspect "$REGISTRY_BASE" > /dev/null 2>&1 \
        || timeout 120 docker pull -q "$REGISTRY_BASE" > /dev/null 2>&1; then
        BASE_IMAGE=$REGISTRY_BASE
        say "base image: $BASE_IMAGE (registry)"
        return 0
    fi
    BASE_IMAGE=$DEBIAN_BASE
    if docker image inspect "$BASE_IMAGE" > /dev/null 2>&1; then
        say "base image: $BASE_IMAGE (no registry; built earlier from Debian packages)"
        return 0
    fi
    say "no registry image: building $BASE_IMAGE from Debian packages (debootstrap)"
    need_tools debootstrap tar
    local t0
    t0=$(now)
    "$ROOT/compose/base-image.sh" --tag "$BASE_IMAGE" > "$WORK/base-image.log" 2>&1 \
        || { tail -20 "$WORK/base-image.log" >&2; fail "compose/base-image.sh"; }
    BASE_SECONDS=$(since "$t0")
    say "base image: $BASE_IMAGE built in ${BASE_SECONDS} s"
}

ensure_wheelhouse() {  # ensure_wheelhouse [PYTHON]: ./wheelhouse, pinned to PYTHON's packages
    local pin_python=${1:-} stamp want constraints=
    want=$(cat "$ROOT/pyproject.toml" "$ROOT/compose/wheelhouse.sh" | sha256sum | cut -c1-16)
    if [ -n "$pin_python" ]; then
        constraints=$WORK/constraints.txt
        "$pin_python" -m pip freeze --exclude-editable 2> /dev/null | grep -v '^-e ' > "$constraints"
        want=$want-$(sha256sum < "$constraints" | cut -c1-16)
    fi
    stamp=$ROOT/wheelhouse/.stamp
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        say "wheelhouse: $ROOT/wheelhouse (up to date)"
        return 0
    fi
    need_tools python3
    local t0
    t0=$(now)
    rm -rf "$ROOT/wheelhouse"
    "$ROOT/compose/wheelhouse.sh" "$ROOT/wheelhouse" ${constraints:+--constraints "$constraints"} \
        > "$WORK/wheelhouse.log" 2>&1 || { tail -20 "$WORK/wheelhouse.log" >&2; fail "wheelhouse"; }
    echo "$want" > "$stamp"
    say "wheelhouse: $(tail -1 "$WORK/wheelhouse.log") in $(since "$t0") s"
}

build_image() {
    if [ -z "$BUILD" ]; then
        docker image inspect "$IMAGE" > /dev/null 2>&1 || fail "--no-build: no image $IMAGE"
        say "image: $IMAGE (as it is, --no-build)"
        return 0
    fi
    ensure_base_image
    local args=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
    [ -n "$WHEELHOUSE" ] && args+=(--build-arg WHEELHOUSE=wheelhouse)
    # Docker's own CLI needs the buildx plugin for BuildKit; the classic builder
    # builds this Dockerfile as well.
    docker buildx version > /dev/null 2>&1 || export DOCKER_BUILDKIT=0
    local t0
    t0=$(now)
    docker build -t "$IMAGE" "${args[@]}" "$ROOT" > "$WORK/build.log" 2>&1 \
        || { tail -30 "$WORK/build.log" >&2; fail "docker build (log $WORK/build.log)"; }
    BUILD_SECONDS=$(since "$t0")
    say "image: $IMAGE built in ${BUILD_SECONDS} s (base $BASE_IMAGE${WHEELHOUSE:+, wheelhouse})"
    docker run --rm "$IMAGE" fedpriv --help > /dev/null || fail "docker run $IMAGE fedpriv --help"
}

make_work() {  # WORK: this run's folder (removed at the end unless --keep)
    WORK=$(mktemp -d /var/tmp/fedpriv-containers.XXXXXX)
    if [ -n "$KEEP" ]; then
        CLEANUPS+=("say 'kept $WORK (--keep)'")
    else
        CLEANUPS+=("rm -rf '$WORK'")
    fi
}

json_get() {  # json_get FILE EXPR: a value of a JSON file (EXPR in Python over d)
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
