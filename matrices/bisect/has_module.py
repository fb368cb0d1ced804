"""Fails as `import MODULE` would when the installed distribution no longer ships MODULE.

FlashInfer's package imports torch and CUDA on import, so the module is looked up without running
its parents: each parent folder of the installed distribution is searched with the path finder an
import uses. When the module is missing this raises the ModuleNotFoundError an import raises.
"""
import importlib.machinery
import importlib.metadata
import sys
from pathlib import Path


def main() -> None:
    module = sys.argv[1]
    top, *middle, leaf = module.split(".")
    dist = importlib.metadata.distribution("flashinfer-python")
    print(f"flashinfer-python {dist.version} at {dist.locate_file('')}")
    folder = Path(dist.locate_file(top)).joinpath(*middle)
    spec = importlib.machinery.PathFinder.find_spec(leaf, [str(folder)])
    if spec is None:
        raise ModuleNotFoundError(f"No module named '{module}'", name=module)
    print(f"{module}: {spec.origin}")


if __name__ == "__main__":
    main()
