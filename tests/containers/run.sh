#!/usr/bin/env bash
# The consortium of docker-compose.yml, run for real in containers, and checked.
#
#   bash tests/containers/run.sh [options]        (root; not part of pytest's suite)
#
# 1. tools: docker, docker-compose (or `docker compose`), and dockerd, debootstrap
#    only when needed; a missing one is named (installed only with --install);
# 2. a Docker daemon: the running one, else dockerd started here with its own data
#    root (/var/lib/fedpriv-docker), socket and PID file, stopped at the end;
# 3. the image (timed): on python:3.11-slim if the daemon has or can pull it, else
#    on fedpriv-base:bookworm made from Debian packages (compose/base-image.sh);
#    every dependency from ./wheelhouse (compose/wheelhouse.sh), so the build
#    needs no network (pinned to $FEDPRIV_PYTHON's packages when it is set);
# 4. the demo's files (compose/demo-setup.sh, BRFSS in 3 partitions), then
#    `docker-compose run --rm submit` (timed): keys, CA, SuperLink, 3 nodes, the
#    deploy-demo run (DP boosting, 5 rounds of depth 4, ε = 2);
# 5. checks: the run's real status (its status.json: completed, 5 of 5 rounds), the
#    model file and its privacy card (`fedpriv inspect`), each node's ledger and
#    audit log in that node's folder and container only (none in the coordinator's
#    folder or container, the exchange volume or another node's), every container's
#    mounts, each node's `fedpriv node status`;
# 6. the numbers: daemon start, base image and image build times, run time,
#    rounds released, AUC, ε; then every container, network and volume it made is
#    removed (and the daemon stopped if it started it).
#
# Options:
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() { sed -n '2,25p' "$0"; common_usage; }
parse_common "$@"
[ ${#REST[@]} -eq 0 ] || { usage; [[ "${REST[0]}" == -h || "${REST[0]}" == --help ]] && exit 0; exit 2; }

make_work
ensure_dockerd
compose_tool
[ -n "$WHEELHOUSE" ] && [ -n "$BUILD" ] && ensure_wheelhouse "${FEDPRIV_PYTHON:-}"
build_image

# -- the consortium ------------------------------------------------------------
DEPLOY=$WORK/deploy
PROJECT=fedpriv-ct$$
export FEDPRIV_DEPLOY=$DEPLOY FEDPRIV_IMAGE=$IMAGE
DC=("${COMPOSE[@]}" -f "$ROOT/docker-compose.yml" -p "$PROJECT")
CLEANUPS+=("say 'removing the containers, network and volume of $PROJECT'; \
${DC[*]} down -v --remove-orphans > '$WORK/down.log' 2>&1")
"$ROOT/compose/demo-setup.sh" "$DEPLOY" --image "$IMAGE" > "$WORK/setup.log" 2>&1 \
    || { cat "$WORK/setup.log" >&2; fail "compose/demo-setup.sh"; }
say "demo files: $(tail -1 "$WORK/setup.log")"

say "docker-compose run --rm submit (keys, CA, SuperLink, 3 nodes, the run)"
t0=$(now)
set +e
"${DC[@]}" run --rm submit 2>&1 | tee "$WORK/submit.log" | grep --line-buffered -E '^\[fedpriv\]|^submitted|^AUC|rror'
rc=${PIPESTATUS[0]}
set -e
RUN_SECONDS=$(since "$t0")
say "compose run: exit $rc in ${RUN_SECONDS} s"
[ "$rc" = 0 ] || { tail -30 "$WORK/submit.log" >&2; fail "submit + follow exited $rc"; }

# -- checks ---------------------------------------------------------------------
COORD=$DEPLOY/coordinator
RUN_ID=$(sed -n 's/^submitted run \([0-9]*\).*/\1/p' "$WORK/submit.log")
OUT=$COORD/results/$RUN_ID
[ -n "$RUN_ID" ] && [ -d "$OUT" ] || fail "no results folder for run '$RUN_ID'"
STATUS=$(json_get "$OUT/status.json" 'd["status"]')
RELEASED="$(json_get "$OUT/status.json" 'd["rounds_released"]') of $(json_get "$OUT/status.json" 'd["rounds_planned"]')"
[ "$STATUS" = completed ] || fail "run $RUN_ID: status.json says $STATUS"
[ "$RELEASED" = "5 of 5" ] || fail "run $RUN_ID: $RELEASED rounds released"
AUC=$(json_get "$OUT/metrics.json" 'round(d["auc"], 4)')
EPS=$(sed -n 's/^AUC .* | ε spent \([0-9.e+-]*\) (PLD).*/\1/p' "$WORK/submit.log")
say "run $RUN_ID: status.json $STATUS, $RELEASED rounds released"

docker run --rm -v "$COORD:/coordinator:ro" "$IMAGE" \
    fedpriv inspect "/coordinator/results/$RUN_ID/model.fedpriv.npz" > "$WORK/card.md" \
    || fail "fedpriv inspect of the model file"
grep -q '^# Privacy card: `boosting`' "$WORK/card.md" || fail "the model's card names no method"
grep -q '\*\*certified\*\*' "$WORK/card.md" || fail "the model's card is not certified"
say "model file and privacy card: $(grep -m1 '^(ε, δ)' "$WORK/card.md")"

# Where every node file is: each hospital's own folder, nowhere else on the host side.
expected=""
for i in 0 1 2; do
    expected+="hospital$i/key/node.key"$'\n'
    for f in fedpriv-node-audit.jsonl fedpriv-node-ledger.json; do
        expected+="hospital$i/state/$f"$'\n'
    done
done
found=$(cd "$DEPLOY" && find . -type f \( -name 'fedpriv-node-*' -o -name node.key \) \
    | sed 's|^\./||' | sort)
[ "$found" = "$(printf '%s' "$expected" | sort)" ] \
    || fail "node files where they should not be:"$'\n'"$found"
for i in 0 1 2; do
    [ -s "$DEPLOY/hospital$i/state/fedpriv-node-ledger.json" ] || fail "hospital$i: empty ledger"
done
# The exchange volume: public material only.
exchange=$(docker run --rm -v "${PROJECT}_exchange:/x:ro" "$IMAGE" sh -c 'cd /x && ls | sort' \
    | tr '\n' ' ')
[ "$exchange" = "ca.crt hospital0.pub hospital1.pub hospital2.pub " ] \
    || fail "the exchange volume holds: $exchange"
# Inside the containers (their own layers and mounts, not only the host folders).
in_container() {  # in_container SERVICE: the node files its filesystem holds
    docker exec "$("${DC[@]}" ps -q "$1")" sh -c \
        "find / -xdev \\( -name 'fedpriv-node-*' -o -name node.key -o -name patients.csv \\) \
         -type f 2>/dev/null; find /node /coordinator \\( -name 'fedpriv-node-*' -o \
         -name node.key -o -name patients.csv \\) -type f 2>/dev/null; true" | sort -u | tr '\n' ' '
}
mounts() {  # mounts SERVICE: its mounts, SOURCE:DESTINATION
    docker inspect -f '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}}{{else}}{{.Source}}{{end}}:{{.Destination}} {{end}}' \
        "$("${DC[@]}" ps -q "$1")"
}
coord_files=$(in_container coordinator)
[ -z "$coord_files" ] || fail "the coordinator's container holds node files: $coord_files"
[ "$(mounts coordinator)" = "$COORD:/coordinator " ] \
    || fail "the coordinator mounts $(mounts coordinator)"
for i in 0 1 2; do
    want="/node/key/node.key /node/patients.csv /node/state/fedpriv-node-audit.jsonl /node/state/fedpriv-node-ledger.json "
    got=$(in_container "hospital-$i")
    [ "$got" = "$want" ] || fail "hospital-$i's container holds: $got"
    got=$(mounts "hospital-$i")
    [[ "$got" == *"$DEPLOY/hospital$i:/node "* && "$got" == *"${PROJECT}_exchange:/exchange "* \
        && $(wc -w <<< "$got") == 2 ]] || fail "hospital-$i mounts $got"
    "${DC[@]}" run --rm --no-deps "hospital-$i" fedpriv node status --state /node/state \
        > "$WORK/node$i.txt" 2> /dev/null || fail "hospital-$i: fedpriv node status"
    grep -q "run $RUN_ID: ε" "$WORK/node$i.txt" || fail "hospital-$i's ledger lacks run $RUN_ID"
    grep -q "chain intact" "$WORK/node$i.txt" || fail "hospital-$i's audit log does not verify"
    say "hospital-$i: $(grep -m1 '^lifetime spend' "$WORK/node$i.txt"); $(grep -m1 '^audit log' "$WORK/node$i.txt" | cut -d';' -f1)"
done
say "node files: each hospital's ledger, audit log and key in its own folder and container only"

echo
say "RESULT compose run: dockerd start $(secs "${DOCKERD_SECONDS:-}" "n/a (running)") | base image build $(secs "${BASE_SECONDS:-}" "n/a (present)") | image build $(secs "${BUILD_SECONDS:-}" "n/a (--no-build)") | compose run ${RUN_SECONDS} s"
say "RESULT run $RUN_ID: $STATUS, $RELEASED rounds released | AUC $AUC | ε $EPS (PLD)"
say "PASSED"
