"""Small real media for end-to-end tests, made with the bundled ffmpeg and libsndfile."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import soundfile as sf

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def gray_frames(count: int = 12, width: int = 64, height: int = 48) -> np.ndarray:
    """Deterministic moving gradients, as planar yuv420p frames (Y, U, V concatenated)."""
    y = np.add.outer(np.arange(height), np.arange(width)).astype(np.int64)
    frames = []
    for index in range(count):
        luma = ((y * 3 + index * 7) % 220 + 16).astype(np.uint8)
        chroma = np.full((height // 2) * (width // 2) * 2, 128, dtype=np.uint8)
        frames.append(np.concatenate([luma.ravel(), chroma]))
    return np.stack(frames)


def write_video(
    path: Path, frames: np.ndarray, width: int = 64, height: int = 48, fps: int = 24
) -> Path:
    """Encode yuv420p frames losslessly (-qp 0), so one changed pixel survives decoding."""
    command = [
        FFMPEG,
        "-y",
        "-v",
        "error",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "yuv420p",
        "-s",
        f"{width}x{height}",
        "-r",
        str(fps),
        "-i",
        "-",
        "-c:v",
        "libx264",
        "-qp",
        "0",
        "-preset",
        "ultrafast",
        "-threads",
        "1",
        "-pix_fmt",
        "yuv420p",
        "-bitexact",
        "-map_metadata",
        "-1",
        str(path),
    ]
    subprocess.run(command, input=frames.tobytes(), check=True)
    return path


def mux(video: Path | None, audio: Path, out: Path, codec: str) -> Path:
    """``video``'s frames (copied; none: audio alone) with ``audio`` encoded by ``codec``
    (one thread, bit-exact), in ``out``'s container."""
    args = ["-y", "-v", "error"]
    if video is not None:
        args += ["-i", str(video), "-i", str(audio), "-map", "0:v", "-map", "1:a", "-c:v", "copy"]
    else:
        args += ["-i", str(audio)]
    args += ["-c:a", codec, "-threads", "1", "-bitexact", "-map_metadata", "-1"]
    subprocess.run([FFMPEG, *args, str(out)], check=True)
    return out


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000) -> Path:
    sf.write(path, samples, rate, subtype="PCM_16")
    return path


def tone(count: int = 1600, rate: int = 16000) -> np.ndarray:
    t = np.arange(count) / rate
    return np.round(np.sin(2 * np.pi * 440 * t) * 12000).astype(np.int16)


def lying_wav(path: Path, samples: np.ndarray, declared_extra: int, rate: int = 16000) -> Path:
    """A WAV whose data chunk header declares more samples than the file holds."""
    data = samples.astype("<i2").tobytes()
    declared = len(data) + 2 * declared_extra
    header = b"RIFF" + struct.pack("<I", 36 + declared) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    header += b"data" + struct.pack("<I", declared)
    path.write_bytes(header + data)
    return path
