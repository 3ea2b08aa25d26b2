#!/usr/bin/env bash
# The decoded check's figures on a many-core machine without this project's dependencies (the
# device tool's H200 host: 16 cores, torch and numpy, no network), in one call:
#
#   bash benchmarks/device_run.sh            (from the repository root; results in $OUT)
#
# What the machine lacks travels in .whl/ (ignored by git), as for tests/gpu/run_on_device.sh:
# soundfile, cffi and pycparser wheels, .whl/py/imageio_ffmpeg, .whl/ffmpeg.xz (a static ffmpeg).
# Runs `benchmarks/run_all.py --only e2e,video,pair` (issue #21's figures: the user's path with
# pytest, the in-process check, control against candidate) and `benchmarks/pipe_probe.py` on the
# same 15 s clip (decode, pipe and hashing apart).
set -u -o pipefail
OUT=${OUT:-$PWD/device-out}
REPEATS=${REPEATS:-7}
mkdir -p "$OUT"
REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$REPO/.whl/py:$REPO PYTHONUNBUFFERED=1
xz -T0 -dc .whl/ffmpeg.xz > /tmp/ffmpeg && chmod +x /tmp/ffmpeg && export IMAGEIO_FFMPEG_EXE=/tmp/ffmpeg
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nproc
  grep -m1 "model name" /proc/cpuinfo
  grep -o -m1 -w sha_ni /proc/cpuinfo || echo "no sha_ni"
  python3 -c "import sys, numpy, pytest; print(sys.version.split()[0], numpy.__version__, pytest.__version__)"
  /tmp/ffmpeg -version | head -1
  git log -1 --format=%H 2>/dev/null || echo "(no git)"
  cat /proc/loadavg
} 2>&1 | tee "$OUT/machine.txt"
timeout 330 python3 benchmarks/run_all.py --only e2e,video,pair --repeats "$REPEATS" \
  --json "$OUT/rows.json" 2>&1 | tee "$OUT/run_all.log"
mkdir -p /tmp/probe
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import run_all
run_all.make_clip(__import__('pathlib').Path('/tmp/probe/clip.mp4'), 15)"
timeout 90 python3 benchmarks/pipe_probe.py /tmp/probe/clip.mp4 --repeats 5 2>&1 \
  | tee "$OUT/pipe_probe.log"
cat /proc/loadavg | tee -a "$OUT/machine.txt"
