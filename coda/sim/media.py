"""Writing frames: GIF / MP4 / PNG files, keyframe subsampling and contact sheets.

Pure numpy + Pillow (imageio-ffmpeg for MP4); no GL. `coda.sim.render` re-exports every name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np


class VideoUnavailable(RuntimeError):
    """MP4 encoding needs ffmpeg through imageio-ffmpeg; GIF always works."""


def _check_frames(frames: np.ndarray, what: str = "frames") -> np.ndarray:  # [T, H, W, 3] uint8
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] == 0:
        raise ValueError(f"{what} must have shape [T>0, H, W, 3], got {frames.shape}")
    if frames.dtype != np.uint8:
        raise TypeError(f"{what} must be uint8 RGB, got dtype {frames.dtype}")
    return frames


def _check_fps(fps: float) -> float:
    if not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    return float(fps)


def save_gif(frames: np.ndarray, path: str | os.PathLike, fps: float = 10) -> None:
    """Write frames ([T, H, W, 3] uint8) as a looping GIF.

    GIF stores 10 ms ticks, so fps above 50 play slower than asked. Pillow merges consecutive
    identical frames into one longer frame; the total duration is kept.
    """
    from PIL import Image

    frames = _check_frames(frames)
    duration = max(10, int(round(1000.0 / _check_fps(fps) / 10.0)) * 10)
    images = [Image.fromarray(f, mode="RGB") for f in frames]
    images[0].save(
        os.fspath(path),
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=duration,
        loop=0,
        disposal=1,
    )


def save_mp4(frames: np.ndarray, path: str | os.PathLike, fps: float = 20) -> None:
    """Write frames ([T, H, W, 3] uint8) as H.264 MP4 through imageio-ffmpeg."""
    frames = _check_frames(frames)
    fps = _check_fps(fps)
    try:
        import imageio.v2 as iio
        import imageio_ffmpeg

        imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as err:
        raise VideoUnavailable(
            f"MP4 writing needs ffmpeg via the imageio-ffmpeg package ({err}). "
            "Install it (`pip install imageio-ffmpeg`, which ships an ffmpeg binary) or write a "
            "GIF with save_gif() instead."
        ) from err
    # yuv420p (playable everywhere) needs even sizes: pad the last row / column if odd.
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    with iio.get_writer(
        os.fspath(path),
        format="FFMPEG",
        mode="I",
        fps=fps,
        codec="libx264",
        pixelformat="yuv420p",
        macro_block_size=2,
    ) as writer:
        for f in frames:
            writer.append_data(f)


def save_png(image: np.ndarray, path: str | os.PathLike) -> None:
    """Write one [H, W, 3] uint8 image (a frame or a contact sheet) as PNG."""
    from PIL import Image

    image = _check_frames(np.asarray(image)[None], "image")[0]
    Image.fromarray(image, mode="RGB").save(os.fspath(path), format="PNG")


def subsample(frames: np.ndarray, n: int) -> np.ndarray:  # [T, ...] -> [min(n, T), ...]
    """n evenly spaced frames including the first and last (keyframes for a report / critic)."""
    frames = np.asarray(frames)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(frames) <= n:
        return frames
    idx = np.round(np.linspace(0, len(frames) - 1, n)).astype(np.int64)
    return frames[idx]


def contact_sheet(
    frames: np.ndarray,  # [N, H, W, 3] uint8
    cols: int = 4,
    *,
    pad: int = 2,
    pad_value: int = 255,
) -> np.ndarray:  # [rows*H + (rows+1)*pad, cols*W + (cols+1)*pad, 3] uint8
    """Tile frames row-major into one image (one PNG for a Markdown report or a VLM prompt)."""
    frames = _check_frames(frames)
    if int(cols) != cols or cols < 1:
        raise ValueError(f"cols must be a positive integer, got {cols!r}")
    if int(pad) != pad or pad < 0 or not 0 <= pad_value <= 255:
        raise ValueError(f"pad must be >= 0 and pad_value in [0, 255], got {pad}, {pad_value}")
    n, h, w, _ = frames.shape
    cols = min(int(cols), n)
    rows = -(-n // cols)
    sheet = np.full(
        (rows * h + (rows + 1) * pad, cols * w + (cols + 1) * pad, 3), pad_value, np.uint8
    )
    for i, f in enumerate(frames):
        r, c = divmod(i, cols)
        y, x = pad + r * (h + pad), pad + c * (w + pad)
        sheet[y : y + h, x : x + w] = f
    return sheet


def _font(px: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=px)  # FreeType (Pillow >= 10.1): scalable
    except (TypeError, OSError):  # an old Pillow / no FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _wrap(text: str, font: Any, width: int) -> list[str]:
    """Greedy word wrap of `text` to lines no wider than `width` px in `font`."""
    lines: list[str] = []
    for para in text.splitlines() or [""]:
        line = ""
        for word in para.split(" "):
            trial = f"{line} {word}" if line else word
            if line and font.getlength(trial) > width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


def labelled_sheet(
    rows: Sequence[np.ndarray],  # R x [K, H, W, 3] uint8: e.g. workspace view, wrist view
    labels: Sequence[str],  # K: one per column (a keyframe)
    *,
    title: str = "",
    cols: int = 6,
    pad: int = 3,
    font_px: int = 14,
) -> np.ndarray:  # [H', W', 3] uint8
    """A keyframe sheet: columns are keyframes (a label strip above each), rows are views of
    the same keyframe stacked; more than `cols` keyframes wrap into further bands; `title`
    (word-wrapped) on top. White background, dark text; one PNG for a report or a person."""
    from PIL import Image, ImageDraw

    rows = [_check_frames(r, f"rows[{i}]") for i, r in enumerate(rows)]
    if not rows or any(r.shape != rows[0].shape for r in rows):
        raise ValueError("rows must be one or more frame stacks of the same shape")
    k, h, w, _ = rows[0].shape
    if len(labels) != k:
        raise ValueError(f"{len(labels)} labels for {k} keyframes")
    cols = max(1, min(int(cols), k))
    font = _font(font_px)
    width = cols * w + (cols + 1) * pad
    title_lines = _wrap(title, font, width - 2 * pad) if title else []
    line_h = font_px + 4
    label_lines = max(len(_wrap(s, font, w)) for s in labels)
    band_h = label_lines * line_h + len(rows) * (h + pad) + pad
    bands = -(-k // cols)
    top = len(title_lines) * line_h + (pad if title_lines else 0)
    sheet = Image.new("RGB", (width, top + bands * band_h + pad), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, line in enumerate(title_lines):
        draw.text((pad, pad + i * line_h), line, fill=(20, 20, 20), font=font)
    for j in range(k):
        b, c = divmod(j, cols)
        x, y = pad + c * (w + pad), top + b * band_h + pad
        for i, line in enumerate(_wrap(labels[j], font, w)):
            draw.text((x, y + i * line_h), line, fill=(20, 20, 90), font=font)
        y += label_lines * line_h
        for r in rows:
            sheet.paste(Image.fromarray(r[j], mode="RGB"), (x, y))
            y += h + pad
    return np.asarray(sheet, np.uint8)
