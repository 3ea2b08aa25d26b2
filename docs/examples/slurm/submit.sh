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
# Refused before anything is queued or created: a host without Slurm's client, or counts that
# would make sbatch's own message about "--array=0--1" the only explanation.
if ! command -v sbatch >/dev/null 2>&1; then
  echo "submit.sh: sbatch is not on PATH: run this on a Slurm submit host (a login node)," \
    "or put Slurm's client commands on PATH" >&2
  exit 2
fi
case "$SHARDS" in '' | *[!0-9]* | 0*)
  echo "submit.sh: SHARDS='$SHARDS': give the number of array tasks, 1 or more" >&2; exit 2 ;;
esac
case "$GPUS" in '' | *[!0-9]*)
  echo "submit.sh: GPUS='$GPUS': give the devices per task, a whole number" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$CAMPAIGN/receipts" "$CAMPAIGN/logs"
export CAMPAIGN
array=$(sbatch --parsable --array="0-$((SHARDS - 1))" --gres="gpu:$GPUS" \
  --output="$CAMPAIGN/logs/shard-%A_%a.log" "$here/lossless-shard.sbatch" "$@")
array=${array%%;*}
if ! verify=$(sbatch --parsable --dependency="afterany:$array" \
  --output="$CAMPAIGN/logs/verify-%j.log" "$here/lossless-verify.sbatch"); then
  echo "submit.sh: the array $array is queued, but its verification was not: queue it" \
    "with: CAMPAIGN=$CAMPAIGN sbatch --dependency=afterany:$array $here/lossless-verify.sbatch" \
    "(or cancel the array: scancel $array)" >&2
  exit 1
fi
echo "$array ${verify%%;*}"
