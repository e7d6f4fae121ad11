#!/usr/bin/env bash
# A consortium on separate "machines": a coordinator container and three hospital
# containers that share no folder, only a network. Public files (ca.crt, each
# node.pub) travel by `docker cp` through the host, as a consortium mails them;
# every other step is the how-to's own command, run on its machine with
# `docker exec`. Then the released model is compared bit for bit with the
# in-process fit on the host, under one injected reproduction key.
#
#   FEDPRIV_PYTHON=/path/to/python bash tests/containers/two_machines.sh [options]
#
# FEDPRIV_PYTHON: a Python on the host that imports this checkout's fedpriv (the
# reference fit; default python3); the image's wheelhouse is pinned to its
# packages, so host and containers compute with the same numpy, scipy, torch.
# The key ($FEDPRIV_SECRET_KEY, fresh each run) reaches the coordinator's SuperLink
# and each node, which starts with --allow-reproduction-key: a reproduction run,
# never a consortium's real one (the nodes' noise is then not their secret).
#
# The how-to, machine by machine (C: coordinator, H_i: hospital i):
#   C    fedpriv coordinator init --host coordinator --dir /srv/coordinator
#   C->  ca.crt to every hospital
#   H_i  fedpriv node keygen --out /srv/node/key --name hospital<i>
#   H_i-> node.pub to the coordinator
#   C    fedpriv coordinator register hospital<i>.pub --name hospital<i>   (node i)
#   C    fedpriv coordinator start --dir /srv/coordinator --detach
#   H_i  fedpriv node start --superlink coordinator:9093 --ca /srv/node/ca.crt
#          --key /srv/node/key --data /srv/node/patients.csv --policy /srv/node/policy.toml
#          --state /srv/node/state --index <i> --nodes 3
#   C    fedpriv coordinator submit --preset deploy-demo ... ; coordinator follow RUN
#   H_i  fedpriv node status --state /srv/node/state
#
# Options:
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() { sed -n '2,31p' "$0"; common_usage; }
parse_common "$@"
[ ${#REST[@]} -eq 0 ] || { usage; [[ "${REST[0]}" == -h || "${REST[0]}" == --help ]] && exit 0; exit 2; }

PY=${FEDPRIV_PYTHON:-python3}
PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} "$PY" -c 'import fedpriv, numpy' 2> /dev/null \
    || fail "FEDPRIV_PYTHON=$PY cannot import fedpriv and numpy (the host's reference fit)"
make_work
ensure_dockerd
[ -n "$WHEELHOUSE" ] && [ -n "$BUILD" ] && ensure_wheelhouse "$PY"
build_image

TAG=fp2m$$
NET=$TAG-net
C=$TAG-coordinator
H=("$TAG-hospital0" "$TAG-hospital1" "$TAG-hospital2")
KEY=$("$PY" -c 'import secrets; print(secrets.token_hex(32))')
MAIL=$WORK/mail  # what travels between machines: public files only
mkdir -p "$MAIL" "$WORK/data" "$WORK/result"
CLEANUPS+=("say 'removing the containers and network of $TAG'; \
docker rm -f $C ${H[*]} > /dev/null 2>&1; docker network rm $NET > /dev/null 2>&1")

# The data stands for what each hospital holds; the reference fit reads the same files.
docker run --rm -v "$WORK/data:/out" "$IMAGE" \
    python -m fedpriv.data.export brfss --num-clients 3 --out /out > /dev/null
docker network create "$NET" > /dev/null
t0=$(now)
machine() {  # machine NAME [ALIAS]: a container with its own filesystem, on the network
    docker run -d --init --name "$1" --hostname "${2:-$1}" --network "$NET" \
        ${2:+--network-alias "$2"} "$IMAGE" sleep infinity > /dev/null
}
machine "$C" coordinator
for i in 0 1 2; do machine "${H[i]}"; done

say "C: coordinator init"
docker exec "$C" fedpriv coordinator init --host coordinator --dir /srv/coordinator
docker cp -q "$C:/srv/coordinator/tls/ca.crt" "$MAIL/ca.crt"
docker exec "$C" mkdir -p /srv/inbox /srv/public
docker cp -q "$WORK/data/test.csv" "$C:/srv/public/test.csv"  # the public test split
for i in 0 1 2; do
    h=${H[i]}
    docker exec "$h" mkdir -p /srv/node
    docker cp -q "$WORK/data/hospital$i.csv" "$h:/srv/node/patients.csv"
    printf '[policy]\nmax-epsilon = 2.0\nmax-delta = 1e-5\nmax-lifetime-epsilon = 10.0\nmax-lifetime-delta = 1e-4\nmethods = ["boosting"]\n' \
        > "$WORK/policy$i.toml"
    docker cp -q "$WORK/policy$i.toml" "$h:/srv/node/policy.toml"
    say "H$i: node keygen"
    docker exec "$h" fedpriv node keygen --out /srv/node/key --name "hospital$i" | tail -1
    docker cp -q "$h:/srv/node/key/node.pub" "$MAIL/hospital$i.pub"
    docker cp -q "$MAIL/ca.crt" "$h:/srv/node/ca.crt"
    docker cp -q "$MAIL/hospital$i.pub" "$C:/srv/inbox/hospital$i.pub"
    said=$(docker exec "$C" fedpriv coordinator register "/srv/inbox/hospital$i.pub" \
        --name "hospital$i" --dir /srv/coordinator)
    say "C: $said"
    INDEX[i]=$(sed -n 's/^registered .* as node \([0-9]*\) .*/\1/p' <<< "$said")
    [ "${INDEX[i]}" = "$i" ] || fail "hospital$i registered as node '${INDEX[i]}'"
done
say "the mail held: $(ls "$MAIL" | tr '\n' ' ')"

say "C: coordinator start --detach (the SuperLink gets the reproduction key)"
docker exec -e "FEDPRIV_SECRET_KEY=$KEY" "$C" fedpriv coordinator start --dir /srv/coordinator --detach
for i in 0 1 2; do
    say "H$i: node start --index ${INDEX[i]} --nodes 3 --allow-reproduction-key"
    docker exec -d -e "FEDPRIV_SECRET_KEY=$KEY" "${H[i]}" fedpriv node start \
        --superlink coordinator:9093 --ca /srv/node/ca.crt --key /srv/node/key \
        --data /srv/node/patients.csv --policy /srv/node/policy.toml --state /srv/node/state \
        --index "${INDEX[i]}" --nodes 3 --allow-reproduction-key
done
for _ in $(seq 120); do
    docker exec "$C" fedpriv coordinator status --dir /srv/coordinator > "$WORK/status.txt" 2>&1 || true
    grep -q '^3 of 3 registered node(s) online' "$WORK/status.txt" && break
    sleep 2
done
grep -q '^3 of 3 registered node(s) online' "$WORK/status.txt" \
    || { cat "$WORK/status.txt" >&2; fail "the three nodes did not come online"; }
say "C: $(grep 'online' "$WORK/status.txt")"

said=$(docker exec "$C" fedpriv coordinator submit --dir /srv/coordinator --preset deploy-demo \
    --set dataset=brfss --max-records 12800 --set eval-path=/srv/public/test.csv)
say "C: $said"
RUN_ID=$(sed -n 's/^submitted run \([0-9]*\).*/\1/p' <<< "$said")
set +e
docker exec "$C" fedpriv coordinator follow "$RUN_ID" --dir /srv/coordinator 2>&1 \
    | tee "$WORK/follow.log" | grep --line-buffered -E '^\[fedpriv\] (round|run|done)|^AUC|rror'
rc=${PIPESTATUS[0]}
set -e
RUN_SECONDS=$(since "$t0")
[ "$rc" = 0 ] || { tail -30 "$WORK/follow.log" >&2; fail "coordinator follow exited $rc"; }
docker cp -q "$C:/srv/coordinator/results/$RUN_ID/." "$WORK/result/"
STATUS=$(json_get "$WORK/result/status.json" 'd["status"]')
RELEASED="$(json_get "$WORK/result/status.json" 'd["rounds_released"]') of $(json_get "$WORK/result/status.json" 'd["rounds_planned"]')"
[ "$STATUS" = completed ] && [ "$RELEASED" = "5 of 5" ] || fail "run $RUN_ID: $STATUS, $RELEASED"
AUC=$(json_get "$WORK/result/metrics.json" 'round(d["auc"], 4)')
EPS=$(json_get "$WORK/result/privacy.json" 'd["epsilon"]')

# Each machine holds what it should: the nodes' ledgers on the nodes, none on C.
on() {  # on MACHINE: the node files its filesystem holds
    docker exec "$1" sh -c "find / -xdev \\( -name 'fedpriv-node-*' -o -name node.key \
        -o -name patients.csv \\) -type f 2> /dev/null; true" | sort | tr '\n' ' '
}
[ -z "$(on "$C")" ] || fail "the coordinator holds node files: $(on "$C")"
for i in 0 1 2; do
    got=$(on "${H[i]}")
    want="/srv/node/key/node.key /srv/node/patients.csv /srv/node/state/fedpriv-node-audit.jsonl /srv/node/state/fedpriv-node-ledger.json "
    [ "$got" = "$want" ] || fail "hospital$i holds: $got"
    docker exec "${H[i]}" fedpriv node status --state /srv/node/state > "$WORK/node$i.txt"
    grep -q "run $RUN_ID: ε" "$WORK/node$i.txt" && grep -q "chain intact" "$WORK/node$i.txt" \
        || fail "hospital$i's ledger or audit log"
    say "H$i: $(grep -m1 '^lifetime spend' "$WORK/node$i.txt")"
done

say "host: the in-process fit under the same key ($PY)"
set +e
FEDPRIV_SECRET_KEY=$KEY PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} "$PY" \
    "$ROOT/tests/containers/reference.py" "$WORK/result" "$WORK"/data/hospital{0,1,2}.csv
same=$?
set -e

echo
say "RESULT two machines: dockerd start $(secs "${DOCKERD_SECONDS:-}" "n/a (running)") | base image build $(secs "${BASE_SECONDS:-}" "n/a (present)") | image build $(secs "${BUILD_SECONDS:-}" "n/a (--no-build)") | machines + run ${RUN_SECONDS} s"
say "RESULT run $RUN_ID: $STATUS, $RELEASED rounds released | AUC $AUC | ε $EPS | bit-for-bit equal to the in-process fit: $([ $same = 0 ] && echo yes || echo NO)"
[ "$same" = 0 ] || fail "the released model is not the in-process fit"
say "PASSED"
