"""Writes the libFuzzer seed corpus tests/fuzz/corpus/ir: each `// -----` chunk of the lit
IR files (comment lines dropped; the invalid ones reach the error paths) and the tile IR of
kernels from the frontend grammar (scripts/fuzz/gen_kernels.py).

  python -m scripts.fuzz.seed_corpus [--kernels N]"""

import argparse
import pathlib

from scripts.fuzz import gen_kernels

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus" / "ir"


def lit_chunks():
    for path in sorted((ROOT / "tests" / "lit").rglob("*.tir")):
        chunks = path.read_text().split("// -----")
        for i, chunk in enumerate(chunks):
            text = "\n".join(line for line in chunk.splitlines() if not line.lstrip().startswith("//")).strip()
            if text:
                yield f"lit-{path.parent.name}-{path.stem}-{i}.tir", text + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernels", type=int, default=100)
    args = p.parse_args()
    CORPUS.mkdir(parents=True, exist_ok=True)
    for old in CORPUS.glob("*.tir"):
        old.unlink()
    for name, text in lit_chunks():
        (CORPUS / name).write_text(text)
    gen_kernels.main(["--count", str(args.kernels), "--seed", "0", "--corpus", str(CORPUS)])


if __name__ == "__main__":
    main()
