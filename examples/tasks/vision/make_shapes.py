"""Generate the example vision task ``shapes_count`` (conf/benchmark/shapes_count.yaml): small
PNG images of coloured shapes and one JSONL row per question (how many shapes of a colour;
for a pair of images, how many in both together). Deterministic (seeded); run from the
repository root to regenerate the committed data:

    python examples/tasks/vision/make_shapes.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
COLOURS = {"red": (220, 30, 30), "blue": (30, 70, 220), "green": (20, 160, 60)}
SIZE = 96


def draw(rng: random.Random, counts: dict[str, int]) -> Image.Image:
    """A white SIZE×SIZE image with ``counts[colour]`` shapes of each colour, not overlapping."""
    img = Image.new("RGB", (SIZE, SIZE), "white")
    pen = ImageDraw.Draw(img)
    taken: list[tuple[int, int]] = []
    for colour, n in counts.items():
        for _ in range(n):
            while True:  # a free cell of a 4×4 grid (16 cells: at most 16 shapes)
                cell = (rng.randrange(4), rng.randrange(4))
                if cell not in taken:
                    taken.append(cell)
                    break
            x, y = cell[0] * 24 + 4, cell[1] * 24 + 4
            box = (x, y, x + 16, y + 16)
            (pen.ellipse if rng.random() < 0.5 else pen.rectangle)(box, fill=COLOURS[colour])
    return img


def main() -> None:
    rng = random.Random(33)
    (HERE / "images").mkdir(exist_ok=True)
    rows = []
    for i in range(8):  # one image: how many shapes of one colour
        counts = {c: rng.randint(0, 4) for c in COLOURS}
        colour = rng.choice(sorted(COLOURS))
        name = f"images/single_{i}.png"
        draw(rng, counts).save(HERE / name)
        rows.append({"id": f"single-{i}", "category": "single", "image": name, "colour": colour,
                     "question": f"How many {colour} shapes are in the image?", "answer": counts[colour]})
    for i in range(4):  # two images, in order: how many shapes of one colour in both
        colour = rng.choice(sorted(COLOURS))
        names, total = [], 0
        for k in range(2):
            counts = {c: rng.randint(0, 3) for c in COLOURS}
            total += counts[colour]
            name = f"images/pair_{i}_{k}.png"
            draw(rng, counts).save(HERE / name)
            names.append(name)
        rows.append({"id": f"pair-{i}", "category": "pair", "image": names, "colour": colour,
                     "question": f"How many {colour} shapes are in the two images together?", "answer": total})
    with (HERE / "shapes_count.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
