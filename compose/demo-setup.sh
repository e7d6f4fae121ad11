#!/usr/bin/env bash
# The folders docker-compose.yml mounts, filled for the demo:
#
#   compose/demo-setup.sh [DIR] [--image fedpriv:latest] [--nodes 3]
#
# DIR (default ./deploy, docker-compose.yml's $FEDPRIV_DEPLOY) gets
#   hospital{i}/patients.csv   BRFSS's partition i (python -m fedpriv.data.export),
#                              standing in for what hospital i holds;
#   hospital{i}/policy.toml    hospital i's budget policy (its own to set);
#   coordinator/test.csv       BRFSS's public test split, scored by the ServerApp.
# The export runs in the image: the host needs only Docker. An existing DIR
# with files is refused (each hospital's key and ledger live there).
set -euo pipefail

DIR=./deploy IMAGE=fedpriv:latest NODES=3
. "$(dirname "$0")/options.sh"
parse_options "$0" 2,12 "--image=IMAGE --nodes=NODES" DIR -- "$@"
if [ -d "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
    echo "demo-setup.sh: $DIR is not empty (a consortium's keys and ledgers live there)" >&2
    exit 2
fi
mkdir -p "$DIR/export" "$DIR/coordinator"
DIR=$(cd "$DIR" && pwd)
docker run --rm -v "$DIR/export:/out" "$IMAGE" \
    python -m fedpriv.data.export brfss --num-clients "$NODES" --out /out
for i in $(seq 0 $((NODES - 1))); do
    mkdir -p "$DIR/hospital$i"
    mv "$DIR/export/hospital$i.csv" "$DIR/hospital$i/patients.csv"
    cat > "$DIR/hospital$i/policy.toml" <<POLICY
# Hospital $i's own budget policy (fedpriv.privacy.node_policy): its node refuses
# any run beyond it, whatever the coordinator asks.
[policy]
max-epsilon = 2.0
max-delta = 1e-5
max-lifetime-epsilon = 10.0
max-lifetime-delta = 1e-4
methods = ["boosting"]
POLICY
done
mv "$DIR/export/test.csv" "$DIR/coordinator/test.csv"
rmdir "$DIR/export"
echo "demo folders in $DIR: coordinator/, $(cd "$DIR" && ls -d hospital* | tr '\n' ' ')"
