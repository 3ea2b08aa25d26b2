#!/bin/bash
# Queue a gate campaign on Slurm: SHARDS array tasks of lossless-shard.sbatch, each with
# GPUS devices, then lossless-verify.sbatch once all of them ended. Run it from a checkout of
# the revision under test; extra arguments go to every shard's pytest.
#   CAMPAIGN=/shared/campaigns/run-42 SHARDS=4 GPUS=8 docs/examples/slurm/submit.sh
# Prints the two job ids: the array's, then the verification's.
set -euo pipefail
: "${CAMPAIGN:?set CAMPAIGN to the campaign folder on the shared file system}"
SHARDS=${SHARDS:-4}
GPUS=${GPUS:-8}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$CAMPAIGN/receipts" "$CAMPAIGN/logs"
export CAMPAIGN
array=$(sbatch --parsable --array="0-$((SHARDS - 1))" --gres="gpu:$GPUS" \
  --output="$CAMPAIGN/logs/shard-%A_%a.log" "$here/lossless-shard.sbatch" "$@")
array=${array%%;*}
verify=$(sbatch --parsable --dependency="afterany:$array" \
  --output="$CAMPAIGN/logs/verify-%j.log" "$here/lossless-verify.sbatch")
echo "$array ${verify%%;*}"
