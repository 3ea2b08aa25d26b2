"""Calibration probe for the ref2va torch model on a GPU, no pytest: ``probe_ref2va.py OUT.json``.

Runs the demo's CLI (``--device cuda``) for each build on short workloads, timing each process
end to end, and reports what the gate suite will judge: fast == control bit for bit, how far
TF32 latents are from the fp32 control, whether two atomics runs differ, and where the time goes
(denoise vs the rest of the process). Used once to size the model; the gate suite is the proof.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RUNS = [
    ("control", 1), ("fast", 1), ("tf32", 1), ("atomics", 1), ("atomics", 1),
    ("control", 5), ("fast", 5), ("control", 15), ("fast", 15),
]  # fmt: skip


def one_run(variant: str, seconds: int, out: Path) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "fixtures.ref2va", "generate", "--device", "cuda",
        "--prompt", "a lighthouse at dusk, waves breaking, gulls overhead", "--seed", "7",
        "--duration", str(seconds), "--size", "320x176", "--steps", "12",
        "--variant", variant, "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"variant": variant, "seconds": seconds, "rc": proc.returncode,
                "stderr": proc.stderr[-2000:]}  # fmt: skip
    timings = json.loads((out / "timings.json").read_text())
    latent = np.load(out / "latent.npy")
    return {
        "variant": variant,
        "seconds": seconds,
        "rc": 0,
        "wall": round(wall, 3),
        "timings": timings["timings"],
        "device_report": timings.get("device_report"),
        "latent_sha": hashlib.sha256(latent.tobytes()).hexdigest()[:16],
        "clip_sha": hashlib.sha256((out / "clip.mp4").read_bytes()).hexdigest()[:16],
        "dispatch": [ln for ln in proc.stderr.splitlines() if "dispatch" in ln],
        "latent_path": str(out / "latent.npy"),
    }


def diff(a: Path, b: Path) -> dict[str, Any]:
    x, y = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
    d = np.abs(x - y)
    return {
        "elements_differing": int((np.load(a).view(np.uint32) != np.load(b).view(np.uint32)).sum()),
        "of": int(x.size),
        "max_abs": float(d.max()),
        "max_rel": float((d / np.maximum(np.abs(x), 1e-30)).max()),
        "max_abs_over_atol_rtol": float((d / (0.05 + 0.05 * np.abs(x))).max()),
    }


def main() -> int:
    dest = Path(sys.argv[1])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (variant, seconds) in enumerate(RUNS):
            r = one_run(variant, seconds, Path(tmp) / f"run{i}")
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "latent_path"}), flush=True)
        by = {}
        for r in results:
            by.setdefault((r["variant"], r["seconds"]), []).append(r)
        checks: dict[str, Any] = {}
        for s in (1, 5, 15):
            c, f = by.get(("control", s), [{}])[0], by.get(("fast", s), [{}])[0]
            if c.get("rc") == 0 and f.get("rc") == 0:
                checks[f"fast_equals_control_{s}s"] = (
                    c["latent_sha"] == f["latent_sha"] and c["clip_sha"] == f["clip_sha"]
                )
                checks[f"ratio_{s}s"] = round(f["wall"] / c["wall"], 3)
        c1, t1 = by[("control", 1)][0], by[("tf32", 1)][0]
        if c1.get("rc") == 0 and t1.get("rc") == 0:
            checks["tf32_vs_control_1s"] = diff(Path(c1["latent_path"]), Path(t1["latent_path"]))
        a = by[("atomics", 1)]
        if all(r.get("rc") == 0 for r in a):
            first, second = Path(a[0]["latent_path"]), Path(a[1]["latent_path"])
            checks["atomics_run1_vs_run2"] = diff(first, second)
    for r in results:
        r.pop("latent_path", None)
    print(json.dumps(checks, indent=1))
    dest.write_text(json.dumps({"runs": results, "checks": checks}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
