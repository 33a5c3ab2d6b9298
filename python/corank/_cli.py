"""The ``corank`` command installed with the package: the Rust command line
(``corank::cli``) run in this process, so ``pip install corank`` needs no Rust toolchain.
``corank --help`` and docs/cli.md say what it does."""

from __future__ import annotations

import sys


def main() -> None:
    from . import _corank, _load_nvrtc

    _load_nvrtc()  # NVRTC from the nvidia-cuda-nvrtc package, for --engine auto|gpu
    sys.exit(_corank.cli_main(["corank", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
