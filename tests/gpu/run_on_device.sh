#!/usr/bin/env bash
# The whole GPU part of pytest-lossless in one call on a CUDA machine (docs/gpu.md):
#
#   bash tests/gpu/run_on_device.sh [full|probe|suite]      (from the repository root)
#
# full (default): GPU goldens written (--update-goldens, the producer runs twice and must agree),
# then the GPU gate suite (`pytest -m gpu --lossless --lossless-backend=cuda`), then
# `python -m pytest_lossless verify` on its receipts. probe: tests/gpu/probe_ref2va.py only
# (timings and bit-identity checks, no pytest). suite: the gate suite and verify, goldens as
# they are.
#
# The machine needs python3 with torch (CUDA), numpy and pytest. What it lacks travels in .whl/
# (ignored by git): soundfile, cffi, pycparser wheels; .whl/py/imageio_ffmpeg (without its
# binary); .whl/ffmpeg.xz (a static ffmpeg, xz-compressed to fit a 64 MiB transfer).
# Results go to $OUT (default ./gpu-out): machine.txt, pytest logs, verify.log, figures.jsonl and
# gpu-run.tgz (receipts, SUMMARY.md, the GPU goldens' manifests).
set -u -o pipefail
MODE=${1:-full}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
REPO=$PWD

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$REPO/.whl/py:$REPO
else
  export PYTHONPATH=$REPO
fi
if [ -f .whl/ffmpeg.xz ] && [ -z "${IMAGEIO_FFMPEG_EXE:-}" ]; then
  xz -dc .whl/ffmpeg.xz > /tmp/ffmpeg && chmod +x /tmp/ffmpeg && export IMAGEIO_FFMPEG_EXE=/tmp/ffmpeg
fi
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
# The plugin from this tree (its pytest11 entry point is not installed there).
python3 -c "import importlib.metadata as m; m.distribution('pytest-lossless')" 2>/dev/null \
  || export PYTEST_ADDOPTS="-p pytest_lossless.plugin ${PYTEST_ADDOPTS:-}"

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id,uuid --format=csv
  nvidia-smi | head -12
  uname -r
  python3 - <<'EOF'
import sys, numpy, pytest, torch
print("python", sys.version.split()[0], "numpy", numpy.__version__, "pytest", pytest.__version__)
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("gpu", torch.cuda.get_device_name(0), "count", torch.cuda.device_count(),
      "capability", torch.cuda.get_device_capability(0))
EOF
  "${IMAGEIO_FFMPEG_EXE:-ffmpeg}" -version | head -1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

if [ "$MODE" = probe ]; then
  timeout 400 python3 tests/gpu/probe_ref2va.py "$OUT/probe.json" 2>&1 | tee "$OUT/probe.log"
  exit $?
fi

RECEIPTS=/tmp/gpu-receipts
rm -rf "$RECEIPTS"
export REF2VA_GPU_FIGURES=$OUT/figures.jsonl
COMMON=(-p no:cacheprovider -m gpu --lossless --lossless-backend=cuda --lossless-devices=0
        --lossless-lock-timeout=120 -rA -v)
status=0
if [ "$MODE" = full ]; then
  timeout "${UPDATE_TIMEOUT:-160}" python3 -m pytest tests/gpu/test_ref2va_gpu.py -k matches_goldens --update-goldens \
    "${COMMON[@]}" --lossless-receipts="$RECEIPTS/update" 2>&1 | tee "$OUT/pytest-update.log"
  echo "update rc=$?" | tee -a "$OUT/pytest-update.log"
fi
timeout "${SUITE_TIMEOUT:-340}" python3 -m pytest tests/gpu "${COMMON[@]}" \
  --lossless-receipts="$RECEIPTS/suite" 2>&1 | tee "$OUT/pytest.log"
status=$?
echo "suite rc=$status" | tee -a "$OUT/pytest.log"
python3 -m pytest_lossless verify "$RECEIPTS/suite" 2>&1 | tee "$OUT/verify.log"
echo "verify rc=$?" | tee -a "$OUT/verify.log"

# Small evidence back: receipts (JSON), summaries, the GPU goldens' manifests and plans.
tar -C / -czf "$OUT/gpu-run.tgz" --exclude="*/report/*" \
  "${RECEIPTS#/}" -C "$REPO" goldens/tests/gpu/test_ref2va_gpu 2>/dev/null
ls -la "$OUT"
exit $status
